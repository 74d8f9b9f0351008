"""Every CSV the harness writes, as text, through one place: cells a spreadsheet would run as a
formula are neutralised, and list cells are JSON.

A text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a
leading ``'`` (OWASP's advice for CSV injection); numbers, negative ones included, stay numbers
(only strings are touched); a carriage return inside a cell becomes a line feed (which the
writer quotes: a bare CR would split the row in a spreadsheet). A list, tuple or mapping (a
row's per-task scores, say) is written as JSON, never as Python's repr. ``csv_text`` writes a
frame (headers too), ``csv_rows`` rows of plain values (the ledger).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads these as a formula


def csv_cell(value: object) -> object:
    """One cell as it is written: a container as JSON, a formula-like string neutralised,
    anything else (numbers, None) as it is."""
    if hasattr(value, "tolist") and not isinstance(value, str | bytes | int | float):
        value = value.tolist()  # a numpy array (or scalar) as plain values
    if isinstance(value, list | tuple | Mapping):
        value = json.dumps(value, default=str, ensure_ascii=False)
    if not isinstance(value, str):
        return value
    if value.startswith(FORMULA_START):
        value = "'" + value
    # a bare CR is a row break to a spreadsheet, and the csv module leaves it unquoted
    return value.replace("\r\n", "\n").replace("\r", "\n")


def csv_text(frame: pd.DataFrame) -> str:
    """``frame`` as CSV with every text cell made formula-safe and every list cell JSON
    (headers too)."""
    import pandas as pd

    safe = frame.copy()
    for name in safe.columns:
        if safe[name].dtype == object or pd.api.types.is_string_dtype(safe[name]):
            safe[name] = safe[name].map(csv_cell)
    safe.columns = [csv_cell(str(c)) for c in safe.columns]
    return str(safe.to_csv(index=False))


def csv_rows(rows: Iterable[Sequence[Any]]) -> str:
    """Rows of plain values as CSV, each cell through ``csv_cell``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in rows:
        writer.writerow([csv_cell(cell) for cell in row])
    return buffer.getvalue()
