"""Inline SVG charts (no library, no network): grouped bars, scatter plots, intervals, and a
ranking with bands (one bar per item, filled where measured, hatched where projected).

Every string from the data is HTML-escaped. A chart is WIDTH × HEIGHT user units with margins
around its plot area; the legend sits in the right margin (the ranking's: above its bars).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from harness.results.publish.format import escape, fmt_usd

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
WIDTH, HEIGHT = 640, 360  # a chart, in SVG user units (pixels at 100 %)
MARGIN_LEFT = 70  # room for the y tick labels and the y axis label
MARGIN_RIGHT = 170  # the legend
MARGIN_TOP = 34  # the title
MARGIN_BOTTOM = 48  # x tick labels and the x axis label


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        if raw <= mult * step:
            step *= mult
            break
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step + 1e-9) + 1)]


def tick_labels(ticks: list[float]) -> list[str]:
    """The ticks as text with the fewest significant digits (at least 4) that tell them apart:
    254.80, 254.82, 254.84 never all read "254.8"."""
    for digits in range(4, 16):
        labels = [f"{t:.{digits}g}" for t in ticks]
        if len(set(labels)) == len(labels):
            return labels
    return [repr(t) for t in ticks]


def padded_range(values: Iterable[float], zero: bool = False) -> tuple[float, float]:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return 0.0, 1.0
    lo, hi = min(vals), max(vals)
    if zero:
        lo = min(lo, 0.0)
    pad = (hi - lo) * 0.06 or abs(hi) * 0.06 or 1.0
    return (lo if zero and lo == 0 else lo - pad), hi + pad


def axes(
    title: str,
    x_label: str,
    y_label: str,
    xr: tuple[float, float],
    yr: tuple[float, float],
    x_ticks: bool = True,
) -> tuple[list[str], Callable[[float], float], Callable[[float], float]]:
    """Title, both axes with their labels and ticks, y grid lines; and the data → SVG scales."""
    width, height = WIDTH - MARGIN_LEFT - MARGIN_RIGHT, HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    left, top = MARGIN_LEFT, MARGIN_TOP
    right, bottom = left + width, top + height

    def sx(v: float) -> float:
        return left + (v - xr[0]) / (xr[1] - xr[0]) * width

    def sy(v: float) -> float:
        return bottom - (v - yr[0]) / (yr[1] - yr[0]) * height

    out = [
        f'<text class="title" x="{left}" y="20">{escape(title)}</text>',
        f'<line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{bottom}"/>',
        f'<text class="label" x="{left + width / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
        f"{escape(x_label)}</text>",
        f'<text class="label" transform="translate(14,{top + height / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>',
    ]
    if x_ticks:
        out += x_tick_texts(xr, sx, bottom + 16)
    for t, label in ticks_in(yr):
        out.append(
            f'<line class="grid" x1="{left}" y1="{sy(t):.1f}" x2="{right}" y2="{sy(t):.1f}"/>'
            f'<text class="tick" x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">'
            f"{escape(label)}</text>"
        )
    return out, sx, sy


def ticks_in(span: tuple[float, float]) -> list[tuple[float, str]]:
    """The nice ticks of a range that fall inside it, each with its label."""
    ticks = nice_ticks(*span)
    labelled = zip(ticks, tick_labels(ticks), strict=True)
    return [(t, label) for t, label in labelled if span[0] <= t <= span[1]]


def x_tick_texts(span: tuple[float, float], sx: Callable[[float], float], y: float) -> list[str]:
    """The x axis's tick labels, centred under each tick at height `y`."""
    return [
        f'<text class="tick" x="{sx(t):.1f}" y="{y}" text-anchor="middle">{escape(label)}</text>'
        for t, label in ticks_in(span)
    ]


def legend(names: Sequence[str]) -> list[str]:
    """One colour swatch and name per series, in the right margin (at most 14)."""
    out = []
    x = WIDTH - MARGIN_RIGHT
    for i, name in enumerate(names[:14]):
        y = MARGIN_TOP + 6 + i * 18
        colour = PALETTE[i % len(PALETTE)]
        out.append(
            f'<rect x="{x + 12}" y="{y - 9}" width="10" height="10" fill="{colour}"/>'
            f'<text class="tick" x="{x + 28}" y="{y}">{escape(shorten(name, 24))}</text>'
        )
    return out


def shorten(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def svg_document(body: list[str], label: str, height: int = HEIGHT) -> str:
    return (
        f'<svg class="chart" role="img" aria-label="{escape(label)}" '
        f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
        'xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>"
    )


def usd_per_mtok_tip(series: str, group: str, value: float) -> str:
    """svg_bars' default tooltip: a GPU's $/Mtok on a package of ``group`` days."""
    return f"{series}, {group} days: {fmt_usd(value)} per Mtok"


def svg_bars(
    title: str,
    y_label: str,
    groups: Sequence[str],
    series: Sequence[str],
    value: dict[tuple[str, str], float],
    x_label: str = "package (days)",
    tip: Callable[[str, str, float], str] = usd_per_mtok_tip,
    value_labels: Callable[[float], str] | None = None,
) -> str:
    """Grouped bars: one group per package, one bar per series (GPU); ``tip(series, group,
    value)`` is each bar's tooltip, ``value_labels`` (where given) writes the value above it."""
    top = max([v for v in value.values() if math.isfinite(v)] or [1.0])
    body, _, sy = axes(title, x_label, y_label, (0.0, 1.0), (0.0, top * 1.08), False)
    pw = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    slot = pw / max(len(groups), 1)
    bar = slot * 0.8 / max(len(series), 1)
    for gi, group in enumerate(groups):
        x0 = MARGIN_LEFT + gi * slot + slot * 0.1
        body.append(
            f'<text class="tick" x="{MARGIN_LEFT + gi * slot + slot / 2:.1f}" '
            f'y="{HEIGHT - MARGIN_BOTTOM + 16}" text-anchor="middle">{escape(group)}</text>'
        )
        for si, name in enumerate(series):
            v = value.get((group, name))
            if v is None or not math.isfinite(v):
                continue
            y = sy(v)
            body.append(
                f'<rect class="bar" x="{x0 + si * bar:.1f}" y="{y:.1f}" width="{bar * 0.92:.1f}" '
                f'height="{sy(0) - y:.1f}" fill="{PALETTE[si % len(PALETTE)]}">'
                f"<title>{escape(tip(name, group, v))}</title></rect>"
            )
            if value_labels is not None:
                body.append(
                    f'<text class="tick" x="{x0 + (si + 0.46) * bar:.1f}" y="{y - 3:.1f}" '
                    f'text-anchor="middle">{escape(value_labels(v))}</text>'
                )
    return svg_document(body + legend(series), title)


def svg_scatter(
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[tuple[str, Sequence[tuple[float, float, str]], bool]],
    diagonal: bool = False,
    hlines: Sequence[tuple[float, str]] = (),
) -> str:
    """Points per series (name, [(x, y, tooltip)], connect-as-a-front); optional y = x line;
    optional horizontal reference lines (y, label), e.g. a latency target."""
    xs = [p[0] for _, pts, _ in series for p in pts]
    ys = [p[1] for _, pts, _ in series for p in pts] + [y for y, _ in hlines]
    if diagonal:
        both = padded_range(xs + ys)
        xr = yr = both
    else:
        xr, yr = padded_range(xs), padded_range(ys)
    body, sx, sy = axes(title, x_label, y_label, xr, yr)
    if diagonal:
        body.append(
            f'<line class="diag" x1="{sx(xr[0]):.1f}" y1="{sy(yr[0]):.1f}" '
            f'x2="{sx(xr[1]):.1f}" y2="{sy(yr[1]):.1f}"><title>y = x</title></line>'
        )
    for y, label in hlines:
        body.append(
            f'<line class="ref" x1="{sx(xr[0]):.1f}" y1="{sy(y):.1f}" x2="{sx(xr[1]):.1f}" '
            f'y2="{sy(y):.1f}"><title>{escape(label)}</title></line>'
            f'<text class="tick" x="{sx(xr[1]) - 4:.1f}" y="{sy(y) - 4:.1f}" '
            f'text-anchor="end">{escape(label)}</text>'
        )
    for si, (_, pts, connect) in enumerate(series):
        colour = PALETTE[si % len(PALETTE)]
        good = [p for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])]
        if connect and len(good) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y, _ in sorted(good))
            body.append(f'<polyline class="front" points="{path}" stroke="{colour}"/>')
        for x, y, tip in good:
            body.append(
                f'<circle class="pt" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="{colour}">'
                f"<title>{escape(tip)}</title></circle>"
            )
    return svg_document(body + legend([name for name, _, _ in series]), title)


def svg_intervals(
    title: str,
    x_label: str,
    items: Sequence[tuple[str, float, float, float]],
    refs: Sequence[tuple[float, str]] = (),
) -> str:
    """Horizontal estimate + CI per item (label, estimate, low, high), with vertical ref lines."""
    items = list(items)[:24]
    values = [v for _, est, lo, hi in items for v in (est, lo, hi)] + [r for r, _ in refs]
    xr = padded_range(values)
    top = 36 + 12 * len(refs)  # one row of labels per reference line
    height = max(HEIGHT, top + MARGIN_BOTTOM + 18 * len(items))
    ph = height - top - MARGIN_BOTTOM
    left = 270
    pw = WIDTH - left - 30

    def sx(v: float) -> float:
        return left + (v - xr[0]) / (xr[1] - xr[0]) * pw

    body = [
        f'<text class="title" x="10" y="20">{escape(title)}</text>',
        f'<line class="axis" x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}"/>',
        f'<text class="label" x="{left + pw / 2:.1f}" y="{height - 8}" text-anchor="middle">'
        f"{escape(x_label)}</text>",
    ]
    body += x_tick_texts(xr, sx, top + ph + 16)
    for i, (value, label) in enumerate(refs):
        anchor = "end" if sx(value) > left + pw * 0.6 else "start"
        body.append(
            f'<line class="ref" x1="{sx(value):.1f}" y1="{top}" x2="{sx(value):.1f}" '
            f'y2="{top + ph}"><title>{escape(label)}</title></line>'
            f'<text class="tick" x="{sx(value):.1f}" y="{34 + 12 * i}" '
            f'text-anchor="{anchor}">{escape(label)}</text>'
        )
    step = ph / max(len(items), 1)
    for i, (label, est, lo, hi) in enumerate(items):
        y = top + step * (i + 0.5)
        body.append(
            f'<text class="tick" x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(shorten(label, 42))}</text>"
        )
        if math.isfinite(lo) and math.isfinite(hi):
            body.append(
                f'<line class="ci" x1="{sx(lo):.1f}" y1="{y:.1f}" x2="{sx(hi):.1f}" y2="{y:.1f}"/>'
            )
        body.append(
            f'<circle class="pt" cx="{sx(est):.1f}" cy="{y:.1f}" r="4" fill="{PALETTE[0]}">'
            f"<title>{escape(f'{label}: {est:.5g} [{lo:.5g}, {hi:.5g}]')}</title></circle>"
        )
    return svg_document(body, title, height)


class RankBar(NamedTuple):
    """One bar of a ranking: its central value and range, measured (filled) or projected
    (hatched), and its tooltip."""

    label: str
    central: float
    low: float
    high: float
    measured: bool
    tip: str


RANK_LEFT = 230  # the bars' labels
RANK_RIGHT = 30
RANK_TOP = 52  # the title and the legend
RANK_ROW = 22  # one bar's row
RANK_BAR = 14  # a bar's thickness
RANK_CAP = 5  # half a whisker cap's height
RANK_FILL = PALETTE[0]
RANK_HEADROOM = 1.1  # the axis ends at the largest value × this


def rank_top(bars: Sequence[RankBar]) -> float:
    """The value at the axis's right end: RANK_HEADROOM × the largest central or high value."""
    return RANK_HEADROOM * max([v for b in bars for v in (b.central, b.high)] or [1.0])


def rank_scale(bars: Sequence[RankBar]) -> Callable[[float], float]:
    """Value → x: 0 at RANK_LEFT, ``rank_top`` at the plot's right end (WIDTH − RANK_RIGHT)."""
    top, width = rank_top(bars), WIDTH - RANK_LEFT - RANK_RIGHT
    return lambda v: RANK_LEFT + v / top * width


def hatch_id(title: str) -> str:
    """The hatch pattern's id, unique per chart title (several charts share one page)."""
    return "hatch-" + hashlib.sha256(title.encode()).hexdigest()[:10]


def hatch_pattern(pattern: str) -> str:
    return (
        f'<defs><pattern id="{pattern}" patternUnits="userSpaceOnUse" width="6" height="6" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/>'
        f'<line x1="0" y1="0" x2="0" y2="6" stroke="{RANK_FILL}" stroke-width="3"/>'
        "</pattern></defs>"
    )


def rank_legend(pattern: str, projected: str, band: str) -> list[str]:
    """Filled: measured; hatched: ``projected``; a whisker: ``band``, in one row under the
    title."""
    y = 36
    return [
        f'<rect x="10" y="{y - 9}" width="14" height="10" fill="{RANK_FILL}"/>'
        f'<text class="tick" x="28" y="{y}">measured</text>',
        f'<rect x="100" y="{y - 9}" width="14" height="10" fill="url(#{pattern})" '
        f'stroke="{RANK_FILL}"/><text class="tick" x="118" y="{y}">{escape(projected)}</text>',
        f'<line x1="330" y1="{y - 4}" x2="352" y2="{y - 4}" stroke="#222"/>'
        f'<text class="tick" x="358" y="{y}">{escape(band)}</text>',
    ]


def whisker(low: float, high: float, y: float) -> str:
    """A range as a horizontal line with a cap at each end (x already scaled)."""
    return (
        f'<g class="whisker" stroke="#222" stroke-width="1.5">'
        f'<line x1="{low:.1f}" y1="{y:.1f}" x2="{high:.1f}" y2="{y:.1f}"/>'
        f'<line x1="{low:.1f}" y1="{y - RANK_CAP:.1f}" x2="{low:.1f}" y2="{y + RANK_CAP:.1f}"/>'
        f'<line x1="{high:.1f}" y1="{y - RANK_CAP:.1f}" x2="{high:.1f}" y2="{y + RANK_CAP:.1f}"/>'
        "</g>"
    )


def svg_ranking(
    title: str,
    x_label: str,
    bars: Sequence[RankBar],
    missing: Sequence[tuple[str, str]] = (),
    projected: str = "projected",
    band: str = "range [low, high]",
) -> str:
    """One horizontal bar per item at its central value (from 0, scale ``rank_scale``), in the
    order given: filled where measured, hatched (an SVG pattern) where projected; a whisker from
    low to high where they differ. ``missing``: (label, reason) of the items without a bar,
    listed under the axis."""
    sx = rank_scale(bars)
    pattern = hatch_id(title)
    bottom = RANK_TOP + RANK_ROW * max(len(bars), 1)
    height = bottom + 44 + (16 * len(missing) + 24 if missing else 0)
    right = WIDTH - RANK_RIGHT
    body = [
        hatch_pattern(pattern),
        f'<text class="title" x="10" y="20">{escape(title)}</text>',
        *rank_legend(pattern, projected, band),
    ]
    for t, label in ticks_in((0.0, rank_top(bars))):
        body.append(
            f'<line class="grid" x1="{sx(t):.1f}" y1="{RANK_TOP}" x2="{sx(t):.1f}" '
            f'y2="{bottom}"/><text class="tick" x="{sx(t):.1f}" y="{bottom + 16}" '
            f'text-anchor="middle">{escape(label)}</text>'
        )
    body += [
        f'<line class="axis" x1="{RANK_LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
        f'<line class="axis" x1="{RANK_LEFT}" y1="{RANK_TOP}" x2="{RANK_LEFT}" y2="{bottom}"/>',
        f'<text class="label" x="{(RANK_LEFT + right) / 2:.1f}" y="{bottom + 34}" '
        f'text-anchor="middle">{escape(x_label)}</text>',
    ]
    for i, b in enumerate(bars):
        y = RANK_TOP + RANK_ROW * (i + 0.5)
        kind = "measured" if b.measured else "projected"
        fill = f'fill="{RANK_FILL}"' if b.measured else f'fill="url(#{pattern})"'
        body.append(
            f'<text class="tick" x="{RANK_LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(shorten(b.label, 38))}</text>"
            f'<rect class="bar {kind}" x="{RANK_LEFT}" y="{y - RANK_BAR / 2:.1f}" '
            f'width="{sx(b.central) - RANK_LEFT:.1f}" height="{RANK_BAR}" {fill} '
            f'stroke="{RANK_FILL}"><title>{escape(b.tip)}</title></rect>'
        )
        if b.high > b.low:
            body.append(whisker(sx(b.low), sx(b.high), y))
    if missing:
        y0 = bottom + 58
        body.append(f'<text class="label" x="10" y="{y0}">Not priced:</text>')
        for i, (label, reason) in enumerate(missing):
            body.append(
                f'<text class="tick" x="10" y="{y0 + 16 * (i + 1)}">'
                f"{escape(shorten(f'{label}: {reason}', 95))}<title>{escape(reason)}</title>"
                "</text>"
            )
    return svg_document(body, title, height)
