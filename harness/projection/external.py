"""Measured results made elsewhere: a documented CSV, read strictly.

Columns (a header line, then one row per measurement; empty = not given):

| column | meaning |
|---|---|
| gpu | catalog card name or alias (harness/spec/catalog/gpus.yaml) |
| gpus | cards the engine ran on (tensor parallel), a whole number ≥ 1 |
| engine | the engine's name (vllm, tensorrt-llm, …), free text |
| engine_version | its version, free text ("unknown (2024)" where the source does not say) |
| model | the model's hub id |
| weights | the weights' format (fp16, bf16, fp8, …), free text |
| scenario | optional: static (the default), offline or server (SCENARIOS says what each is) |
| batch / concurrency | a static batch, or the requests in flight, whole ≥ 1 (a static row: one) |
| input_tokens / output_tokens | per request, whole ≥ 1 (offline and server rows: may be empty) |
| output_tok_s | aggregate output tokens per second over the batch |
| tpot_ms | time per output token, ms |
| ttft_ms | time to first token, ms |
| e2e_s | end-to-end seconds of one request (of the whole static batch) |
| source | where the figure was read (URL, repository@commit path) |

At least one of output_tok_s, tpot_ms, ttft_ms, e2e_s per static row; output_tok_s alone on an
offline or server row. Rows read here are external: their quality is unknown, so they are never
gated or priced, only used to score projections.

A row on a card the catalog lacks, or with a value in a column this reader does not know, is
skipped and counted with its reason (``--strict``: refused). Two rows with the same key
(``ExternalRow.key``) and other figures are refused, naming both lines; the same figures twice
are read once. Digits are ASCII; the file is refused by its size before it is read.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.errors import UserInputError, quote
from harness.spec import catalog

COLUMNS = (
    "gpu", "gpus", "engine", "engine_version", "model", "weights", "scenario", "batch",
    "concurrency", "input_tokens", "output_tokens", "output_tok_s", "tpot_ms", "ttft_ms", "e2e_s",
    "source",
)  # fmt: skip
REQUIRED = ("gpu", "gpus", "engine", "engine_version", "model", "weights", "input_tokens",
            "output_tokens", "source")  # fmt: skip
FIGURES = ("output_tok_s", "tpot_ms", "ttft_ms", "e2e_s")
STATIC = "static"
# static: a static batch or a fixed concurrency; offline: every request at once (saturated
# throughput); server: arrivals under latency bounds. Offline and server rows run a benchmark's
# data set at its own load: no batch or lengths, and output_tok_s is their only figure.
SCENARIOS = (STATIC, "offline", "server")
MAX_ROWS = 100_000
MAX_BYTES = 32 * 2**20  # the largest file read (refused by its size, before it is read)
MAX_TEXT = 300
MAX_COUNT = 10**7
WHOLE = re.compile(r"[0-9]+", re.ASCII)
NUMBER = re.compile(r"\+?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)

Where = tuple[str, int, str]  # file, line, column


class ExternalRow(BaseModel):
    """One measurement made elsewhere (provenance: ``source``; quality unknown)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpu: str  # catalog name
    gpus: int
    engine: str
    engine_version: str
    model: str
    weights: str
    scenario: str = STATIC
    batch: int | None
    concurrency: int | None
    input_tokens: int | None  # None: an offline or server row (the benchmark's data set)
    output_tokens: int | None
    output_tok_s: float | None
    tpot_ms: float | None
    ttft_ms: float | None
    e2e_s: float | None
    source: str
    line: int

    @property
    def load(self) -> int:
        """Sequences in flight: the batch, else the concurrency; 0 for an offline or server row
        (the benchmark's own load)."""
        return self.batch if self.batch is not None else self.concurrency or 0

    @property
    def stack(self) -> str:
        """The software that made the figure: engine, its version, and a scenario other than
        static (the ledger's key keeps unlike stacks and regimes apart)."""
        regime = "" if self.scenario == STATIC else f" ({self.scenario})"
        return f"{self.engine} {self.engine_version}{regime}"

    @property
    def key(self) -> tuple[object, ...]:
        """What a measurement is of: two rows with the same key must agree."""
        return (self.gpu, self.gpus, self.stack, self.model, self.weights, self.batch,
                self.concurrency, self.input_tokens, self.output_tokens)  # fmt: skip

    @property
    def figures(self) -> tuple[float | None, ...]:
        return (self.output_tok_s, self.tpot_ms, self.ttft_ms, self.e2e_s)


class Skipped(BaseModel):
    """A row left out, and why."""

    model_config = ConfigDict(frozen=True)
    line: int
    reason: str


class ExternalFile(BaseModel):
    """The rows read, and the rows skipped with their reasons."""

    model_config = ConfigDict(frozen=True)
    rows: list[ExternalRow]
    skipped: list[Skipped]

    def skipped_text(self) -> str:
        """'3 rows skipped: 2 card 'B200' not in the catalog (first line 4), …' ('' for none)."""
        if not self.skipped:
            return ""
        counts = Counter(s.reason for s in self.skipped)
        first: dict[str, int] = {}
        for s in self.skipped:
            first.setdefault(s.reason, s.line)
        parts = [f"{n} {reason} (first line {first[reason]})" for reason, n in counts.items()]
        rows = "row" if len(self.skipped) == 1 else "rows"
        return f"{len(self.skipped)} {rows} skipped: " + "; ".join(parts)


def _whole(text: str, where: Where) -> int:
    if not WHOLE.fullmatch(text) or not 1 <= int(text) <= MAX_COUNT:
        _fail(where, f"a whole number in 1..{MAX_COUNT:,} (ASCII digits)", text)
    return int(text)


def _positive(text: str, where: Where) -> float:
    value = float(text) if NUMBER.fullmatch(text) else 0.0
    if not 0 < value < float("inf"):
        _fail(where, "a finite number > 0 (ASCII digits)", text)
    return value


def _fail(where: Where, expected: str, got: object) -> None:
    file, line, field = where
    raise UserInputError(
        f"expected {expected}, got {quote(got)}", file=file, line=line, field=field
    )


def read_external(path: str | Path, strict: bool = False) -> ExternalFile:
    """Every row of an external CSV (unknown cards and columns skipped unless ``strict``), or a
    one-line UserInputError (file, line, column)."""
    path = Path(path)
    if not path.is_file():
        raise UserInputError("external CSV not found (expected a regular file)", file=str(path))
    too_big = f"larger than {MAX_BYTES // 2**20} MiB"
    if path.stat().st_size > MAX_BYTES:
        raise UserInputError(too_big, file=str(path))
    with path.open("rb") as handle:
        data = handle.read(MAX_BYTES + 1)  # bounded even if the file grew since
    if len(data) > MAX_BYTES:
        raise UserInputError(too_big, file=str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserInputError("not UTF-8 text", file=str(path)) from None
    return parse_external(text, str(path), strict)


def parse_external(text: str, filename: str = "<external>", strict: bool = False) -> ExternalFile:
    reader = csv.reader(io.StringIO(text))
    header = _header(next(reader, None), filename, strict)
    rows: list[ExternalRow] = []
    skipped: list[Skipped] = []
    first_line: dict[tuple[object, ...], ExternalRow] = {}
    end = reader.line_num
    for cells in reader:
        number, end = end + 1, reader.line_num  # a quoted cell may span lines: its first line
        if not cells:
            continue
        if len(rows) + len(skipped) >= MAX_ROWS:
            raise UserInputError(f"more than {MAX_ROWS:,} rows", file=filename, line=number)
        if len(cells) != len(header):
            raise UserInputError(
                f"{len(cells)} cells where the header has {len(header)}", file=filename, line=number
            )
        named = dict(zip(header, (c.strip() for c in cells), strict=True))
        reason = _skip_reason(named, strict, (filename, number, "gpu"))
        if reason is not None:
            skipped.append(Skipped(line=number, reason=reason))
            continue
        row = _row(named, filename, number)
        earlier = first_line.setdefault(row.key, row)
        if earlier is not row:
            _same_figures(earlier, row, filename)
            skipped.append(Skipped(line=number, reason="the same measurement as an earlier row"))
            continue
        rows.append(row)
    return ExternalFile(rows=rows, skipped=skipped)


def _header(header: list[str] | None, filename: str, strict: bool) -> list[str]:
    if header is None:
        raise UserInputError("empty file: expected a header line", file=filename, line=1)
    header = [h.strip() for h in header]
    unknown = [h for h in header if h not in COLUMNS]
    if strict and unknown:
        raise UserInputError(
            f"unknown column {quote(unknown[0])}; known: {', '.join(COLUMNS)}",
            file=filename,
            line=1,
        )
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise UserInputError(f"no column {missing[0]!r}", file=filename, line=1)
    repeated = [h for h in header if header.count(h) > 1]
    if repeated:
        raise UserInputError(f"column {quote(repeated[0])} twice", file=filename, line=1)
    return header


def _skip_reason(cells: dict[str, str], strict: bool, where: Where) -> str | None:
    """Why a row is skipped (a value in an unknown column, a card the catalog lacks), or None;
    ``strict``: refused instead."""
    extra = next((name for name, value in cells.items() if name not in COLUMNS and value), None)
    if extra is not None:
        return f"a value in unknown column {quote(extra)}"
    try:
        catalog.gpu(cells["gpu"])
    except UserInputError as exc:
        if strict or not cells["gpu"]:
            raise UserInputError(exc.message, file=where[0], line=where[1], field="gpu") from None
        return f"card {quote(cells['gpu'])} not in the catalog"
    return None


def _same_figures(earlier: ExternalRow, row: ExternalRow, filename: str) -> None:
    if earlier.figures != row.figures:
        raise UserInputError(
            f"the same measurement as line {earlier.line} with other figures "
            f"({', '.join(FIGURES)}: {_shown(earlier.figures)} there, {_shown(row.figures)} here)",
            file=filename,
            line=row.line,
        )


def _shown(figures: tuple[float | None, ...]) -> str:
    return "/".join("—" if f is None else f"{f:g}" for f in figures)


def _row(cells: dict[str, str], filename: str, line: int) -> ExternalRow:
    def where(field: str) -> Where:
        return filename, line, field

    scenario = cells.get("scenario") or STATIC
    if scenario not in SCENARIOS:
        _fail(where("scenario"), f"one of {', '.join(SCENARIOS)}", scenario)
    static = scenario == STATIC
    for name in REQUIRED:
        if not cells.get(name) and (static or name not in ("input_tokens", "output_tokens")):
            _fail(where(name), "a value", "")
    for name, value in cells.items():
        if len(value) > MAX_TEXT:
            _fail(where(name), f"at most {MAX_TEXT} characters", value)
    wholes = {
        n: _whole(cells[n], where(n)) if cells.get(n) else None
        for n in ("gpus", "batch", "concurrency", "input_tokens", "output_tokens")
    }
    if static and wholes["batch"] is None and wholes["concurrency"] is None:
        _fail(where("batch"), "a batch or a concurrency", "")
    figures = {n: _positive(cells[n], where(n)) if cells.get(n) else None for n in FIGURES}
    _check_figures(figures, static, where)
    return ExternalRow(
        gpu=catalog.gpu(cells["gpu"]).name,
        gpus=wholes["gpus"] or 1,
        engine=cells["engine"],
        engine_version=cells["engine_version"],
        model=cells["model"],
        weights=cells["weights"],
        scenario=scenario,
        batch=wholes["batch"],
        concurrency=wholes["concurrency"],
        input_tokens=wholes["input_tokens"],
        output_tokens=wholes["output_tokens"],
        output_tok_s=figures["output_tok_s"],
        tpot_ms=figures["tpot_ms"],
        ttft_ms=figures["ttft_ms"],
        e2e_s=figures["e2e_s"],
        source=cells["source"],
        line=line,
    )


def _check_figures(
    figures: dict[str, float | None], static: bool, where: Callable[[str], Where]
) -> None:
    if static and all(v is None for v in figures.values()):
        _fail(where("output_tok_s"), f"at least one of {', '.join(FIGURES)}", "")
    if not static:
        if figures["output_tok_s"] is None:
            _fail(where("output_tok_s"), "output tokens a second (an offline or server row)", "")
        other = next((n for n in FIGURES[1:] if figures[n] is not None), None)
        if other is not None:
            _fail(
                where(other),
                "no value on an offline or server row (output_tok_s only)",
                figures[other],
            )
