"""Before you rent: every configuration that passed the gate, carried to every tariff's card with
the band a ledger lends it; the ranking per model and package, its verdict (robust, or the short
rental that decides); and the package that fits a traffic.

Projection of one measured row onto a card (``project_row``):
- decode and prefill by ``project`` (the measured share of the roofline carried);
- the band from ``harness.projection.book``: your own runs' book first, then the shipped ones
  (``book.SHIPPED_LEDGERS``, each fitted apart, never pooled); a book lends one only inside its
  data's scope, for cards and a stack it measured, from a cell validated by leaving a card out.
  Else the figure is shown **unvalidated** with the reason ("no validated band: measure it", or
  "outside … data", flagged). A row under OVERHEAD_BOUND_FRACTION of its roofline is outside
  every book's data;
- the **centre**: the projected figure × its band's median ratio (re-centred; the band holds
  it); the figure from the roofline share alone is shown beside it. No band: the projected
  figure itself, unvalidated;
- memory fit, the KV room and the largest batch from the planner on the target
  (``harness.plan.plan_point``): KV room = the card's capacity − (the plan's peak − its KV cache);
  the largest batch = the largest batch ≤ MAX_BATCH the plan fits (bisection);
- serving at the SLO is **not projected**: a level's attainment depends on the queue, which the
  ratio of peaks does not carry.
A card projected onto itself is the measured row, labelled ``measured``: its range the point.

Ranking (``ranking``): per (model, package length) and tariff, the card's cheapest configuration
by its centre in $/Mtok of output (``harness.results.pricing``'s package hour and $/Mtok), with
[low, high] from the decode band (cost ∝ 1 ÷ tok/s: low from the band's high). The verdict
(``verdict``): **robust** only when ≥ 2 cards have figures, the cheapest is measured or banded,
and its high is below every other's low; a card without a validated band is always in
contention. Else the experiment that decides: for each projected card in contention, the plan's
budget (``harness.budget``) of its configurations in contention, billed on that card's shortest
tariff (hourly, rounded up to its billing unit, the whole node).

The package that fits a traffic: ``harness.projection.traffic_fit``; the text of all of it:
``harness.projection.text``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from harness import budget as planned
from harness.plan import plan_point
from harness.plan.measured import measured_fit
from harness.projection import book as books_
from harness.projection import ledger, project
from harness.projection.book import Band, Book
from harness.results import pricing
from harness.spec import catalog, compat
from harness.spec.catalog import GpuSpec
from harness.spec.labels import configuration_label
from harness.spec.scenario import MAX_BATCH, Point
from harness.spec.tariffs import BILLING_SECONDS, HOURS_PER_DAY, Tariff, TariffTable

MEASURED = "measured"
UNVALIDATED = "unvalidated"
SECONDS_PER_DAY = HOURS_PER_DAY * 3600
# A row below this share of its bandwidth roofline is overhead-bound (launches, Python): the
# ratio of bandwidths does not carry it, and no shipped ledger (6–72B models) has such rows.
OVERHEAD_BOUND_FRACTION = 0.05
Row = Mapping[Any, Any]  # one record of the aggregate's points frame
TARGET_KIND = {"nvidia": "cuda", "amd": "rocm", "cpu": "cpu"}


def projected_label(source: str) -> str:
    return f"projected (from {source})"


# --- projection of measured rows ----------------------------------------------------------


def candidates(points: pd.DataFrame, quality_class: str) -> pd.DataFrame:
    """The offline rows that pass the class on one card of the catalog (layouts: not yet)."""
    if points.empty:
        return points
    passing = points[pricing.pass_column(quality_class)].fillna(False).to_numpy(dtype=bool)
    eligible = points["cost_eligible"].fillna(False).to_numpy(dtype=bool)
    one_card = pricing.gpus_used(points) == 1
    known = points["gpu"].map(lambda g: isinstance(g, str) and g in catalog.gpus())
    keep = passing & eligible & one_card & known.to_numpy(dtype=bool)
    kept: pd.DataFrame = points[keep].reset_index(drop=True)
    return kept


def layouts_left_out(points: pd.DataFrame, quality_class: str) -> str | None:
    """One line naming the passing rows on several cards that ``candidates`` leaves out, and why;
    None where there are none."""
    if points.empty or "layout" not in points:
        return None
    passing = points[pricing.pass_column(quality_class)].fillna(False).to_numpy(dtype=bool)
    several = pricing.gpus_used(points) > 1
    labels = list(dict.fromkeys(points.loc[passing & several, "layout"].astype(str)))
    if not labels:
        return None
    return (
        f"layouts are not projected: {int((passing & several).sum())} passing row(s) on several "
        f"cards ({', '.join(labels)}) are left out (a projection carries one card's measured "
        "share of its roofline; a layout's all-reduces and its node are not projected yet): "
        "their measured prices are in the report's cost tables"
    )


class Projection(BaseModel):
    """One measured configuration on one card: measured, projected, or skipped with its reason.
    ``decode_tok_s`` is the roofline-share projection; ``decode_centre`` re-centres it on its
    band's median; without a band, ``decode_why`` says why (unvalidated)."""

    model_config = ConfigDict(frozen=True)
    model: str
    configuration: str
    backend: str
    quantization: str
    kv_cache_dtype: str
    batch: int
    context: int
    output_tokens: int
    repeats: int
    source: str
    card: str
    label: str
    decode_tok_s: float | None = None
    decode_band: Band | None = None
    decode_why: str = ""  # why no band
    prefill_tok_s: float | None = None
    prefill_band: Band | None = None
    prefill_why: str = ""
    fits: bool | None = None
    memory: str = ""
    kv_room_gib: float | None = None
    largest_batch: int | None = None
    setup_s: float | None = None  # the measured row's model load + engine start
    skipped: str = ""
    flags: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        return not self.skipped and bool(self.fits) and self.decode_tok_s is not None

    @property
    def validated(self) -> bool:
        """Measured, or its decode figure carries a validated band."""
        return self.label == MEASURED or self.decode_band is not None

    @property
    def decode_centre(self) -> float:
        """The decode figure re-centred on its band's median (measured: the figure itself)."""
        assert self.decode_tok_s is not None
        return self.decode_tok_s * (self.decode_band.median if self.decode_band else 1.0)

    def decode_range(self) -> tuple[float, float] | None:
        """(low, high) decode tok/s; the measured figure twice; None without a band."""
        assert self.decode_tok_s is not None
        if self.label == MEASURED:
            return self.decode_tok_s, self.decode_tok_s
        if self.decode_band is None:
            return None
        return self.decode_tok_s * self.decode_band.low, self.decode_tok_s * self.decode_band.high


def point_on(row: Row, card: GpuSpec, batch: int | None = None) -> Point:
    """The row's configuration as a point on the card's target."""
    return Point(
        model=str(row["model"]), revision=str(row.get("revision") or "main"),
        backend=row["backend"], quantization=row["quantization"],
        kv_cache_dtype=row["kv_cache_dtype"], batch=batch or int(row["batch"]),
        context=int(row["context"]), output_tokens=int(row["output_tokens"]),
        target=TARGET_KIND[card.vendor], repeats=int(row.get("repeats") or 5),
        **loaded(row),
    )  # fmt: skip


def loaded(row: Row) -> dict[str, Any]:
    """What the row's configuration loads beside the model, for its fit: its layout, its draft
    (speculative decoding) and its adapter."""
    return {k: row.get(k) for k in ("layout", "speculative", "adapter") if _text(row.get(k))}


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def largest_batch(point: Point, card: GpuSpec) -> int:
    """The largest batch ≤ MAX_BATCH the plan fits on the card (0: not even batch 1)."""

    def fits(b: int) -> bool:
        return plan_point(point.model_copy(update={"batch": b}), card).fits

    if not fits(1):
        return 0
    low, high = 1, MAX_BATCH
    if fits(high):
        return high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def why_not(row: Row, source: GpuSpec, card: GpuSpec) -> str:
    """Why the row is not projected onto the card, or ''."""
    if (source.vendor == "cpu") != (card.vendor == "cpu"):
        return "CPU and GPU figures are not projected onto each other (the catalog's CPU figures are planning figures, not peaks)"  # noqa: E501
    quantization = str(row["quantization"])
    reason = project.cannot_run(card, quantization)
    if reason:
        return reason
    fields = {**{k: row[k] for k in ("backend", "quantization", "kv_cache_dtype")},
              "target": TARGET_KIND[card.vendor]}  # fmt: skip
    rule = compat.rule_for(fields)
    return rule.reason if rule is not None else ""


def query(row: Row, phase: str, source: str, target: str) -> books_.Query:
    """What a book must cover to lend the row's projection a band."""
    return books_.Query(
        phase=phase, source=source, target=target, engine=str(row["backend"]),
        weights=str(row["quantization"]), kv_cache_dtype=str(row["kv_cache_dtype"]),
        arch=ledger.arch_of(str(row["model"])), load=int(row["batch"]),
        input_tokens=int(row["context"]), output_tokens=int(row["output_tokens"]),
    )  # fmt: skip


def band_for(row: Row, phase: str, source: str, target: str, books: Sequence[Book]) -> Band | str:
    """The band the books lend, or why none does (an overhead-bound row: outside every one)."""
    share = _number(row.get("roofline_fraction"))
    if share is not None and share < OVERHEAD_BOUND_FRACTION:
        return f"outside every ledger's data: overhead-bound ({share:.2%} of its roofline)"
    return books_.lend(books, query(row, phase, source, target))


def project_row(row: Row, card: GpuSpec, books: Sequence[Book]) -> Projection:
    source = catalog.gpu(str(row["gpu"]))
    same = source.name == card.name
    base = {
        "model": str(row["model"]), "configuration": configuration_label(row),
        "backend": str(row["backend"]), "quantization": str(row["quantization"]),
        "kv_cache_dtype": str(row["kv_cache_dtype"]), "batch": int(row["batch"]),
        "context": int(row["context"]), "output_tokens": int(row["output_tokens"]),
        "repeats": int(row.get("repeats") or 5), "source": source.name, "card": card.name,
        "label": MEASURED if same else projected_label(source.name),
        "setup_s": _number(row.get("load_s")),
    }  # fmt: skip
    reason = "" if same else why_not(row, source, card)
    if reason:
        return Projection(**base, skipped=reason)
    decode, prefill = _number(row.get("decode_tok_s")), _number(row.get("prefill_tok_s"))
    quantization = str(row["quantization"])
    bands: dict[str, Band | str | None] = {"decode": None, "prefill": None}
    if not same:
        decode = None if decode is None else project.project_decode(decode, source, card)
        if prefill is not None:
            prefill = project.project_prefill(prefill, source, card, quantization)
        bands = {p: band_for(row, p, source.name, card.name, books) for p in ledger.PHASES}
    point = point_on(row, card)
    plan = plan_point(point, card)
    fits, memory = measured_fit(plan, _number(row.get("peak_mib_decode"))) if same else (
        plan.fits, plan.reason)  # fmt: skip
    batch = max(largest_batch(point, card), int(row["batch"]) if same else 0)
    return Projection(
        **base,
        decode_tok_s=decode, prefill_tok_s=prefill, **_band_fields("decode", bands["decode"]),
        **_band_fields("prefill", bands["prefill"]),
        fits=fits, memory=memory,
        kv_room_gib=plan.capacity_gib - (plan.total_gib - plan.kv_cache_gib),
        largest_batch=batch,
        flags=_flags(row, source, card, same),
    )  # fmt: skip


def _band_fields(phase: str, got: Band | str | None) -> dict[str, Any]:
    if isinstance(got, Band):
        return {f"{phase}_band": got}
    return {f"{phase}_why": got or ""}


def _number(value: object) -> float | None:
    if value is None or not isinstance(value, int | float | np.number) or value != value:
        return None
    return float(value)


def _flags(row: Row, source: GpuSpec, card: GpuSpec, same: bool) -> tuple[str, ...]:
    """Warnings beside the figure (a projection outside a ledger's data says so in its band's
    place: ``band_for``)."""
    if same:
        return ()
    out = []
    flavour = project.fp8_flag(source, card, str(row["quantization"]), str(row["kv_cache_dtype"]))
    if flavour:
        out.append(flavour)
    return tuple(out)


def project_all(
    points: pd.DataFrame,
    cards: Iterable[str],
    quality_class: str,
    books: Sequence[Book] | None = None,
) -> list[Projection]:
    """Every passing row onto every card (its own card included, as measured)."""
    rows = candidates(points, quality_class)
    books = books_.books_for(rows) if books is None else books
    specs = [catalog.gpu(c) for c in dict.fromkeys(cards)]
    out = [project_row(r, c, books) for r in rows.to_dict(orient="records") for c in specs]
    measured_cards = {(p.model, p.configuration, p.card) for p in out if p.label == MEASURED}
    # a card where the configuration was measured keeps only its measured row
    return [
        p for p in out
        if p.label == MEASURED or (p.model, p.configuration, p.card) not in measured_cards
    ]  # fmt: skip


# --- the ranking --------------------------------------------------------------------------------


class RankLine(BaseModel):
    """One tariff's card for one model and package length: its cheapest configuration, at its
    centre (re-centred on the band's median) and at the roofline share alone."""

    model_config = ConfigDict(frozen=True)
    model: str
    days: int
    provider: str
    card: str
    gpus_per_node: int
    label: str
    configuration: str = ""
    usd_per_mtok: float | None = None  # the centre
    usd_projected: float | None = None  # the roofline share alone (not re-centred)
    usd_low: float | None = None  # None: no validated band
    usd_high: float | None = None
    band_source: str = ""  # where the band was read, or why there is none
    note: str = ""
    projection: Projection | None = None

    @property
    def measured(self) -> bool:
        return self.label == MEASURED

    @property
    def validated(self) -> bool:
        return self.measured or self.usd_low is not None


class Price(BaseModel):
    """$/Mtok of output on one package: the centre, the roofline share alone, the band."""

    model_config = ConfigDict(frozen=True)
    centre: float
    projected: float
    low: float | None
    high: float | None


def price(projection: Projection, tariff: Tariff, days: int, utilisation: float) -> Price:
    """$/Mtok of output on the tariff's package of ``days`` (low from the band's fast end)."""
    package = next(p for p in tariff.packages if p.days == days)
    hour = pricing.package_usd_per_hour(
        tariff.package_price_usd(package), days, utilisation, 1 / tariff.gpus_per_node
    )
    assert projection.decode_tok_s is not None
    span = projection.decode_range()
    rates = [projection.decode_centre, projection.decode_tok_s, *(span or ())]
    costs = [float(c) for c in pricing.usd_per_mtok(hour, np.array(rates))]
    low, high = (costs[3], costs[2]) if span else (None, None)
    return Price(centre=costs[0], projected=costs[1], low=low, high=high)


def ranking(
    projections: Sequence[Projection], tariffs: TariffTable, utilisation: float
) -> dict[tuple[str, int], list[RankLine]]:
    """Per (model, package days): one line per tariff with such a package, cheapest centre
    first."""
    out: dict[tuple[str, int], list[RankLine]] = {}
    models = list(dict.fromkeys(p.model for p in projections))
    lengths = sorted({p.days for t in tariffs.tariffs for p in t.packages})
    for model in models:
        mine = [p for p in projections if p.model == model]
        for days in lengths:
            lines = [
                _line(model, days, t, [p for p in mine if p.card == t.gpu], utilisation)
                for t in tariffs.tariffs
                if any(p.days == days for p in t.packages)
            ]
            out[(model, days)] = sorted(
                lines, key=lambda x: (x.usd_per_mtok is None, x.usd_per_mtok or 0.0)
            )
    return out


def _line(
    model: str, days: int, tariff: Tariff, mine: list[Projection], utilisation: float
) -> RankLine:
    base = {"model": model, "days": days, "provider": tariff.provider, "card": tariff.gpu,
            "gpus_per_node": tariff.gpus_per_node}  # fmt: skip
    usable = [p for p in mine if p.usable]
    if not usable:
        why = next((p.skipped or p.memory for p in mine), "no passing configuration to project")
        return RankLine(**base, label="—", note=why)
    priced = [(price(p, tariff, days, utilisation), p) for p in usable]
    # the measured row wins on its own card; else the cheapest centre
    cost, best = min(priced, key=lambda x: (x[1].label != MEASURED, x[0].centre))
    source = best.decode_band.source if best.decode_band else best.decode_why
    return RankLine(
        **base, label=best.label if best.validated else f"{best.label}, {UNVALIDATED}",
        configuration=best.configuration, usd_per_mtok=cost.centre,
        usd_projected=cost.projected, usd_low=cost.low, usd_high=cost.high,
        band_source=MEASURED if best.label == MEASURED else source,
        note="; ".join(best.flags), projection=best,
    )  # fmt: skip


class Trial(BaseModel):
    """One rental of the experiment: a card on its cheapest hourly tariff."""

    model_config = ConfigDict(frozen=True)
    card: str
    provider: str
    hours: float
    usd: float
    configurations: int
    billing: str


class Verdict(BaseModel):
    model_config = ConfigDict(frozen=True)
    robust: bool
    cheapest: str
    text: str
    trials: list[Trial] = []

    @property
    def experiment_usd(self) -> float:
        return sum(t.usd for t in self.trials)


def verdict(
    lines: Sequence[RankLine],
    projections: Sequence[Projection],
    tariffs: TariffTable,
    utilisation: float,
) -> Verdict | None:
    """Robust, or what is missing and the rentals that decide. Robust needs ≥ 2 cards with
    figures, the cheapest (by centre) measured or banded, and its high below every other's low;
    a card without a validated band is always in contention (its range is unknown). Each
    projected card in contention is measured on its cheapest hourly tariff for the plan's
    budget of its configurations in contention."""
    priced = [x for x in lines if x.usd_per_mtok is not None]
    if not priced:
        return None
    best = priced[0]
    where = f"{best.card} ({best.provider})"
    bound = best.usd_high if best.validated and best.usd_high is not None else math.inf
    rivals = [x for x in priced[1:] if not x.validated or (x.usd_low or 0.0) <= bound]
    if len({x.card for x in priced}) < 2:
        lead = f"no verdict: only {where} has a figure, no other card to compare it with"
        if best.validated:
            return Verdict(robust=False, cheapest=where, text=lead)
    elif best.validated and not rivals:
        return Verdict(
            robust=True,
            cheapest=where,
            text=f"robust: {where}'s upper bound is below every other card's lower bound",
        )
    else:
        lead = _contention(where, best, rivals)
    cards = dict.fromkeys(x.card for x in [best, *rivals] if not x.measured)
    trials = [t for c in cards if (t := _trial(c, best, bound, projections, tariffs, utilisation))]
    if not trials:
        return Verdict(
            robust=False,
            cheapest=where,
            text=f"{lead}; every card in contention was measured: repeat them to narrow it",
        )
    rentals = "; ".join(
        f"{t.card} ({t.provider}, billed per {t.billing}) {_duration(t.hours)} for "
        f"{t.configurations} configuration(s), ${t.usd:,.2f}"
        for t in trials
    )
    total = sum(t.usd for t in trials)
    return Verdict(
        robust=False, cheapest=where, trials=trials,
        text=(
            f"{lead}. The experiment that decides: rent {rentals} (hourly, the plan's budget of "
            f"the configurations in contention; speed only: quality carries over for the same "
            f"format and engine): ${total:,.2f} in all"
        ),
    )  # fmt: skip


def _contention(where: str, best: RankLine, rivals: Sequence[RankLine]) -> str:
    """'not robust: …': the cheapest without a validated band, the rivals whose band overlaps
    it, the rivals without a band."""
    parts = []
    overlap = [f"{x.card} ({x.provider})" for x in rivals if x.validated]
    unbanded = [f"{x.card} ({x.provider})" for x in rivals if not x.validated]
    if not best.validated:
        parts.append(f"{where} is cheapest on a projected figure with no validated band")
        if overlap:
            parts.append(f"its range is unknown, so it may not beat {', '.join(overlap)}")
    elif overlap:
        parts.append(f"{', '.join(overlap)} overlap {where}")
    if unbanded:
        parts.append(f"no validated band for {', '.join(unbanded)}: in contention until measured")
    return "not robust: " + "; ".join(parts)


def _duration(hours: float) -> str:
    if hours < 1 / 60:
        return f"{hours * 3600:.0f} s"
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.2f} h"


def _trial(
    card_name: str,
    best: RankLine,
    bound: float,
    projections: Sequence[Projection],
    tariffs: TariffTable,
    utilisation: float,
) -> Trial | None:
    """Measuring the card's configurations in contention (no validated band, or a low ≤
    ``bound`` on any of its tariffs' package of that length) on its cheapest hourly tariff."""
    mine = [p for p in projections if p.card == card_name and p.model == best.model and p.usable]
    on = [t for t in tariffs.for_gpu(card_name) if any(x.days == best.days for x in t.packages)]
    contending = [
        p for p in mine if p.label != MEASURED and _contends(p, on, best, bound, utilisation)
    ]
    if not contending:
        return None
    card = catalog.gpu(card_name)
    plans = [plan_point(_point(p, card), card) for p in contending]
    seconds = planned.budget(plans, [], None, phases=planned.phase_seconds(plans, {})).est_seconds
    cheapest = min(tariffs.for_gpu(card_name), key=lambda t: t.hourly_usd)
    usd = billed_seconds(seconds, cheapest.billing) / 3600 * cheapest.hourly_usd
    return Trial(card=card_name, provider=cheapest.provider, hours=seconds / 3600, usd=usd,
                 configurations=len(contending), billing=cheapest.billing)  # fmt: skip


def _contends(
    p: Projection, on: Sequence[Tariff], best: RankLine, bound: float, utilisation: float
) -> bool:
    """No validated band, or a low ≤ ``bound`` on one of the tariffs."""
    costs = [price(p, t, best.days, utilisation) for t in on]
    return any(c.low is None or c.low <= bound for c in costs)


def _point(p: Projection, card: GpuSpec) -> Point:
    fields = ("model", "backend", "quantization", "kv_cache_dtype", "batch", "context",
              "output_tokens", "repeats")  # fmt: skip
    return Point.model_validate(
        {**{f: getattr(p, f) for f in fields}, "target": TARGET_KIND[card.vendor]}
    )


def billed_seconds(seconds: float, billing: str) -> float:
    """Seconds rounded up to the billing unit (BILLING_SECONDS)."""
    unit = BILLING_SECONDS[billing]
    return math.ceil(seconds / unit - 1e-9) * unit


class BeforeYouRent(BaseModel):
    """Everything `harness report` and `harness rent` show."""

    model_config = ConfigDict(frozen=True)
    projections: list[Projection]
    ranking: dict[tuple[str, int], list[RankLine]]
    verdicts: dict[tuple[str, int], Verdict | None]
    own_pairs: int


def before_you_rent(
    points: pd.DataFrame, tariffs: TariffTable, quality_class: str, utilisation: float
) -> BeforeYouRent:
    rows = candidates(points, quality_class)
    books = books_.books_for(rows)
    projections = project_all(points, [t.gpu for t in tariffs.tariffs], quality_class, books)
    ranked = ranking(projections, tariffs, utilisation)
    verdicts = {k: verdict(v, projections, tariffs, utilisation) for k, v in ranked.items()}
    return BeforeYouRent(projections=projections, ranking=ranked, verdicts=verdicts,
                         own_pairs=sum(c.pairs for c in books[0].cells.values()))  # fmt: skip
