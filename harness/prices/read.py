"""A feed file read safely: a regular file, at most ``MAX_FEED_BYTES``, UTF-8, CSV with a header
that names the columns its schema needs; every refusal one line naming the file, row and field."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.errors import UserInputError
from harness.files import decode_utf8, read_capped
from harness.prices.offer import feed_error

MAX_FEED_BYTES = 64 << 20  # 64 MiB: SkyPilot's largest v8 vms.csv is a few MiB
MAX_FEED_ROWS = 500_000


def feed_text(path: Path, what: str) -> str:
    """The text of a feed file, or one line saying why not (too large, not UTF-8, not a file)."""
    try:
        raw = read_capped(path, MAX_FEED_BYTES, what)
    except FileNotFoundError:
        raise UserInputError(f"{what} not found", file=str(path)) from None
    return decode_utf8(raw, path, what)


def csv_rows(text: str, source: str, needed: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(row number, cells) of each data row; the header must name every ``needed`` column."""
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise feed_error(source, 1, "header", f"not CSV: {exc}") from None
    missing = [c for c in needed if c not in header]
    if missing:
        raise feed_error(
            source,
            1,
            "header",
            f"missing column(s) {', '.join(missing)}; this schema needs {', '.join(needed)}",
        )
    count = 0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise feed_error(source, reader.line_num, "row", f"not CSV: {exc}") from None
        count += 1
        if count > MAX_FEED_ROWS:
            raise feed_error(
                source, reader.line_num, "row", f"more than {MAX_FEED_ROWS:,} rows; filter the feed"
            )
        if None in cells:
            raise feed_error(source, reader.line_num, "row", "more cells than the header names")
        yield reader.line_num, {k: (v or "").strip() for k, v in cells.items()}
