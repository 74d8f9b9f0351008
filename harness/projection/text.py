"""Before you rent as text: the ranking, the projections and a traffic's options as table cells
(the CLI's tables and the report's Markdown), and the report's section."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness.projection.book import NO_BAND, Band
from harness.projection.rent import MEASURED, UNVALIDATED, BeforeYouRent, Projection, RankLine
from harness.projection.traffic_fit import Option, TrafficFit


def _usd(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:.4g}" if value < 1000 else f"${value:,.0f}"


def ranking_rows(lines: Sequence[RankLine]) -> list[dict[str, str]]:
    """The priced lines as table cells (CLI and Markdown): the centre (re-centred on the band's
    median) and the roofline share alone beside it; the others are ``unpriced_line``'s."""
    rows = []
    for x in lines:
        if x.usd_per_mtok is None:
            continue
        if x.measured:
            rng = "—"  # a measured figure is its own point
        elif x.usd_low is not None:
            rng = f"[{_usd(x.usd_low)}, {_usd(x.usd_high)}]"
        else:
            rng = NO_BAND
        rows.append({
            "card (tariff)": f"{x.card}×{x.gpus_per_node} ({x.provider})",
            "figures": x.label,
            "configuration": x.configuration or "—",
            "$/Mtok out": _usd(x.usd_per_mtok),
            "roofline share alone": "—" if x.measured else _usd(x.usd_projected),
            "[low, high]": rng,
            "band from": x.band_source or "—",
            "note": x.note,
        })  # fmt: skip
    return rows


def unpriced_line(lines: Sequence[RankLine]) -> str:
    """One line: the tariff cards that could not be priced, grouped by why ('' for none)."""
    why: dict[str, list[str]] = {}
    for x in lines:
        if x.usd_per_mtok is None:
            cards = why.setdefault(x.note or "not priced", [])
            name = f"{x.card}×{x.gpus_per_node} ({x.provider})"
            if name not in cards:
                cards.append(name)
    if not why:
        return ""
    return "not priced: " + "; ".join(f"{', '.join(c)}: {w}" for w, c in why.items())


def projection_rows(projections: Sequence[Projection]) -> list[dict[str, str]]:
    """Every projected configuration with its bands and the planner's figures (measured rows
    stay in the measured tables)."""
    rows = []
    for p in projections:
        if p.label == MEASURED:
            continue
        rows.append({
            "model": p.model, "configuration": p.configuration, "card": p.card,
            "figures": p.label,
            "decode tok/s": _tok(p.decode_tok_s, p.decode_band, p.decode_why),
            "prefill tok/s": _tok(p.prefill_tok_s, p.prefill_band, p.prefill_why),
            "fits": "—" if p.fits is None else ("yes" if p.fits else "no"),
            "KV room GiB": "—" if p.kv_room_gib is None else f"{p.kv_room_gib:.1f}",
            "largest batch": "—" if p.largest_batch is None else str(p.largest_batch),
            "skipped / flags": p.skipped or "; ".join(p.flags),
        })  # fmt: skip
    return rows


def _tok(value: float | None, band: Band | None, why: str) -> str:
    """The projected figure; with a band, its centre and [low, high]; else why it has none."""
    if value is None:
        return "—"
    if band is None:
        return f"{value:,.0f} ({UNVALIDATED}: {why})"
    return (
        f"{value * band.median:,.0f} [{value * band.low:,.0f}, {value * band.high:,.0f}] "
        f"(roofline share alone {value:,.0f})"
    )


def option_rows(options: Sequence[Option]) -> list[dict[str, str]]:
    return [
        {
            "card (tariff)": f"{o.card} ({o.provider})", "package": o.package,
            "figures": o.label, "configuration": o.configuration,
            "sized at tok/s": f"{o.tok_s:,.4g} ({o.sized_at})", "nodes": str(o.nodes),
            "utilisation per node": f"{o.utilisation:.3f}", "setup s": f"{o.setup_s:.1f}",
            "$/day": f"${o.usd_per_day:,.2f}", "$/Mtok": _usd(o.usd_per_mtok),
            "break-even utilisation": "—" if o.breakeven_utilisation is None
            else f"{o.breakeven_utilisation:.3f}",
        }
        for o in options
    ]  # fmt: skip


def choice_line(fit: TrafficFit, traffic: float) -> str:
    options = fit.options
    if not options:
        return "no card of the tariffs can serve it (nothing passed, fits or projects)"
    best = options[0]
    text = (
        f"at {traffic:.3g} output tokens a day: {best.card} ({best.provider}) {best.package}, "
        f"{best.nodes} node(s) sized at {best.sized_at}, utilisation per node "
        f"{best.utilisation:.3f}, ${best.usd_per_day:,.2f}/day ({best.label})"
    )
    runner = next(
        (
            o
            for o in options[1:]
            if (o.provider, o.card, o.package) != (best.provider, best.card, best.package)
        ),
        None,
    )
    if runner is not None:
        margin = (runner.usd_per_day - best.usd_per_day) / best.usd_per_day * 100
        text += (
            f"; runner-up {runner.card} ({runner.provider}) {runner.package} at "
            f"${runner.usd_per_day:,.2f}/day, {margin:.1f} % dearer"
        )
    if best.breakeven_utilisation is not None:
        text += (
            f"; this package beats hourly billing above utilisation "
            f"{best.breakeven_utilisation:.3f} (without setup or storage)"
        )
    return text


SERVING_NOTE = (
    "Serving at the SLO is not projected: a level's attainment depends on queueing, which the "
    "ratio of peaks does not carry. Rent the card to measure it."
)


def markdown(
    rent: BeforeYouRent, quality_class: str, render: Callable[[list[dict[str, str]]], str]
) -> list[str]:
    """The report's section: the ranking per model and package with its verdict, and the
    projections (``render``: rows → a Markdown table)."""
    parts = [
        f"\n## Before you rent: every tariff's card, class {quality_class}\n",
        "Measured rows are carried to every tariff's card at their measured share of the "
        "roofline (decode by bandwidth, prefill by the format's tensor peak); each projected "
        f"figure carries the band a ledger validated by leaving a card out, or says "
        f"'{NO_BAND}'. Projected figures are labelled and never enter the measured tables "
        "above. $/Mtok of output tokens at the centre (the projection re-centred on its band's "
        f"median), the roofline share alone beside it, [low, high] from the decode band; "
        f"{SERVING_NOTE}\n",
    ]
    for (model, days), lines in rent.ranking.items():
        rows = ranking_rows(lines)
        if rows:
            parts += [f"### {model}, {days}-day package\n", render(rows)]
        found = rent.verdicts.get((model, days))
        if found is not None:
            parts.append(f"**{model}, {days} days: {found.text}**\n")
    for model in dict.fromkeys(m for m, _ in rent.ranking):
        missing = unpriced_line([x for (m, _), v in rent.ranking.items() if m == model for x in v])
        if missing:
            parts.append(f"{model}: {missing}\n")
    rows = projection_rows(rent.projections)
    if rows:
        parts += ["### Projected configurations\n", render(rows)]
    return parts
