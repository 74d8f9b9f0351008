"""Numbers and text as a person reads them: dollars, counts, significant digits, escaping.

Every formatter takes anything (None, NaN, numpy scalars) and returns "–" when there is no value.
"""

from __future__ import annotations

import html
import math
from typing import Any

from harness.errors import without_controls


def number(value: Any) -> float | None:
    """A finite float, or None (missing, NaN, infinite, not a number)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) or math.isinf(out) else out


def number_or_nan(value: Any) -> float:
    v = number(value)
    return float("nan") if v is None else v


def escape(value: Any) -> str:
    """HTML-escape anything (quotes too: safe inside attributes); control characters (a folder
    named with an escape sequence) shown as escapes, ``\\x1b``."""
    return html.escape(without_controls(str(value)), quote=True)


# Characters a Markdown renderer would read as syntax inside a table cell: the escape itself, the
# cell separator, and what would open a tag or an entity (backslash-escaped, as CommonMark reads
# them literally: `<formula>` stays readable in the raw file and shows as itself when rendered).
MD_SPECIAL = ("\\", "|", "<", ">", "&")


def md_escape(value: Any) -> str:
    """Anything as the text of one Markdown table cell, on one line, its Markdown-special
    characters backslash-escaped (MD_SPECIAL): no tag or entity a renderer would act on."""
    text = without_controls(str(value).replace("\r", " ").replace("\n", " "))
    for char in MD_SPECIAL:
        text = text.replace(char, "\\" + char)
    return text


def fmt_value(value: Any) -> str:
    """A table cell as text: "" for no value, floats to 4 significant digits, the rest as is."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def fmt_usd(value: Any) -> str:
    v = number(value)
    if v is None:
        return "–"
    return f"${v:,.2f}" if abs(v) >= 100 else f"${v:.4g}"


def fmt_count(value: Any) -> str:
    v = number(value)
    if v is None:
        return "–"
    for size, unit in ((1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(v) >= size:
            return f"{v / size:.3g}{unit}"
    return f"{v:.3g}"


def fmt_float(value: Any, digits: int = 4) -> str:
    v = number(value)
    return "–" if v is None else f"{v:.{digits}g}"


def fmt_pct_ci(est: Any, low: Any, high: Any) -> str:
    e, lo, hi = number(est), number(low), number(high)
    if e is None:
        return "–"
    if lo is None or hi is None:
        return f"{e:+.3f}"
    return f"{e:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def fmt_interval(value: Any) -> str:
    """An (estimate, low, high) triple in one cell, as ``fmt_pct_ci`` writes it."""
    try:
        est, low, high = value
    except (TypeError, ValueError):
        return "–"
    return fmt_pct_ci(est, low, high)


def fmt_int(value: Any) -> str:
    v = number(value)
    return "–" if v is None else f"{v:.0f}"
