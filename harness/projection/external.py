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
| batch / concurrency | a static batch, or the requests in flight; at least one, whole ≥ 1 |
| input_tokens / output_tokens | per request, whole ≥ 1 |
| output_tok_s | aggregate output tokens per second over the batch |
| tpot_ms | time per output token, ms |
| ttft_ms | time to first token, ms |
| e2e_s | end-to-end seconds of one request (of the whole static batch) |
| source | where the figure was read (URL, repository@commit path) |

At least one of output_tok_s, tpot_ms, ttft_ms, e2e_s per row. Rows read here are external:
their quality is unknown, so they are never gated or priced, only used to score projections.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.errors import UserInputError, quote
from harness.spec import catalog

COLUMNS = (
    "gpu", "gpus", "engine", "engine_version", "model", "weights", "batch", "concurrency",
    "input_tokens", "output_tokens", "output_tok_s", "tpot_ms", "ttft_ms", "e2e_s", "source",
)  # fmt: skip
REQUIRED = ("gpu", "gpus", "engine", "engine_version", "model", "weights", "input_tokens",
            "output_tokens", "source")  # fmt: skip
FIGURES = ("output_tok_s", "tpot_ms", "ttft_ms", "e2e_s")
MAX_ROWS = 100_000
MAX_BYTES = 32 * 2**20
MAX_TEXT = 300
MAX_COUNT = 10**7


class ExternalRow(BaseModel):
    """One measurement made elsewhere (provenance: ``source``; quality unknown)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpu: str  # catalog name
    gpus: int
    engine: str
    engine_version: str
    model: str
    weights: str
    batch: int | None
    concurrency: int | None
    input_tokens: int
    output_tokens: int
    output_tok_s: float | None
    tpot_ms: float | None
    ttft_ms: float | None
    e2e_s: float | None
    source: str
    line: int

    @property
    def load(self) -> int:
        """Sequences in flight: the batch, else the concurrency."""
        return self.batch if self.batch is not None else self.concurrency or 1


def _whole(text: str, where: tuple[str, int, str]) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_COUNT:
        _fail(where, f"a whole number in 1..{MAX_COUNT:,}", text)
    return int(text)


def _positive(text: str, where: tuple[str, int, str]) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        _fail(where, "a finite number > 0", text)
    return value


def _fail(where: tuple[str, int, str], expected: str, got: object) -> None:
    file, line, field = where
    raise UserInputError(
        f"expected {expected}, got {quote(got)}", file=file, line=line, field=field
    )


def read_external(path: str | Path) -> list[ExternalRow]:
    """Every row of an external CSV, or a one-line UserInputError (file, line, column)."""
    path = Path(path)
    if not path.is_file():
        raise UserInputError("external CSV not found (expected a regular file)", file=str(path))
    data = path.read_bytes()[: MAX_BYTES + 1]
    if len(data) > MAX_BYTES:
        raise UserInputError(f"larger than {MAX_BYTES // 2**20} MiB", file=str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserInputError("not UTF-8 text", file=str(path)) from None
    return parse_external(text, str(path))


def parse_external(text: str, filename: str = "<external>") -> list[ExternalRow]:
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise UserInputError("empty file: expected a header line", file=filename, line=1)
    header = [h.strip() for h in header]
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise UserInputError(
            f"unknown column {quote(unknown[0])}; known: {', '.join(COLUMNS)}",
            file=filename,
            line=1,
        )
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise UserInputError(f"no column {missing[0]!r}", file=filename, line=1)
    rows: list[ExternalRow] = []
    for number, cells in enumerate(reader, start=2):
        if not cells:
            continue
        if len(rows) >= MAX_ROWS:
            raise UserInputError(f"more than {MAX_ROWS:,} rows", file=filename, line=number)
        if len(cells) != len(header):
            raise UserInputError(
                f"{len(cells)} cells where the header has {len(header)}", file=filename, line=number
            )
        rows.append(
            _row(dict(zip(header, (c.strip() for c in cells), strict=True)), filename, number)
        )
    return rows


def _row(cells: dict[str, str], filename: str, line: int) -> ExternalRow:
    def where(field: str) -> tuple[str, int, str]:
        return filename, line, field

    for name in REQUIRED:
        if not cells.get(name):
            _fail(where(name), "a value", "")
    for name, value in cells.items():
        if len(value) > MAX_TEXT:
            _fail(where(name), f"at most {MAX_TEXT} characters", value)
    try:
        gpu = catalog.gpu(cells["gpu"]).name
    except UserInputError as exc:
        raise UserInputError(exc.message, file=filename, line=line, field="gpu") from None
    counts = {
        n: _whole(cells[n], where(n)) if cells.get(n) else None for n in ("batch", "concurrency")
    }
    if counts["batch"] is None and counts["concurrency"] is None:
        _fail(where("batch"), "a batch or a concurrency", "")
    figures = {n: _positive(cells[n], where(n)) if cells.get(n) else None for n in FIGURES}
    if all(v is None for v in figures.values()):
        _fail(where("output_tok_s"), f"at least one of {', '.join(FIGURES)}", "")
    return ExternalRow(
        gpu=gpu,
        gpus=_whole(cells["gpus"], where("gpus")),
        engine=cells["engine"],
        engine_version=cells["engine_version"],
        model=cells["model"],
        weights=cells["weights"],
        batch=counts["batch"],
        concurrency=counts["concurrency"],
        input_tokens=_whole(cells["input_tokens"], where("input_tokens")),
        output_tokens=_whole(cells["output_tokens"], where("output_tokens")),
        output_tok_s=figures["output_tok_s"],
        tpot_ms=figures["tpot_ms"],
        ttft_ms=figures["ttft_ms"],
        e2e_s=figures["e2e_s"],
        source=cells["source"],
        line=line,
    )
