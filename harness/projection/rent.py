"""Before you rent: every configuration that passed the gate, carried to every tariff's card with
the band the ledger sets; the ranking per model and package, its verdict (robust, or the short
rental that decides); and the package that fits a traffic.

Projection of one measured row onto a card (``project_row``):
- decode and prefill by ``project`` (the measured share of the roofline carried); the band is
  measured ÷ projected from ``bands`` (your own runs where the same configuration ran on ≥ 2
  cards and MIN_OWN_PAIRS held-out pairs exist, else the shipped ledger's pair, else its class,
  else its "all" line where the class has too few keys for a band, else none, said so);
- memory fit, the KV room and the largest batch from the planner on the target
  (``harness.plan.plan_point``): KV room = the card's capacity − (the plan's peak − its KV cache);
  the largest batch = the largest batch ≤ MAX_BATCH the plan fits (bisection);
- serving at the SLO is **not projected**: a level's attainment depends on the queue, which the
  ratio of peaks does not carry.
A card projected onto itself is the measured row, labelled ``measured``, with no band.

Ranking (``ranking``): per (model, package length) and tariff, the card's cheapest configuration
in $/Mtok of output (``harness.results.pricing``'s package hour and $/Mtok), as [low, high] from
the decode band (cost ∝ 1 ÷ tok/s: low from the band's high). **robust** when the cheapest's high
is below every other's low; else the experiment that decides: for each projected card in
contention (its low ≤ the cheapest's high), the plan's budget (``harness.budget``) of its
configurations in contention, billed on that card's shortest tariff (hourly, rounded up to its
billing unit, the whole node); the cheapest such rental.

The package that fits a traffic: ``harness.projection.traffic_fit``; the text of all of it:
``harness.projection.text``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from harness import budget as planned
from harness.plan import plan_point
from harness.projection import ledger, project
from harness.results import pricing
from harness.spec import catalog, compat
from harness.spec.catalog import GpuSpec
from harness.spec.labels import configuration_label
from harness.spec.scenario import MAX_BATCH, Point
from harness.spec.tariffs import BILLING_SECONDS, HOURS_PER_DAY, Tariff, TariffTable

MEASURED = "measured"
SECONDS_PER_DAY = HOURS_PER_DAY * 3600
MIN_OWN_PAIRS = 10  # held-out pairs of your own runs before their band replaces the shipped one
# A row below this share of its bandwidth roofline is overhead-bound (launches, Python): the
# ratio of bandwidths does not carry it, and the ledger (8B–70B models) never saw such rows.
OVERHEAD_BOUND_FRACTION = 0.05
SHIPPED = Path(__file__).resolve().parents[1] / "data/external/argonne"
# The shipped ledgers, first match wins: the one whose cards include the target.
SHIPPED_LEDGERS = {"ledger.csv": "Argonne", "ledger-with-mi300x.csv": "Argonne with MI300X"}
Row = Mapping[Any, Any]  # one record of the aggregate's points frame
TARGET_KIND = {"nvidia": "cuda", "amd": "rocm", "cpu": "cpu"}


def projected_label(source: str) -> str:
    return f"projected (from {source})"


# --- bands --------------------------------------------------------------------------------------


class Band(BaseModel):
    """measured ÷ projected between low and high; ``source`` says where it was read."""

    model_config = ConfigDict(frozen=True)
    low: float
    high: float
    source: str


EXACT = Band(low=1.0, high=1.0, source=MEASURED)


class ShippedLedger(BaseModel):
    """One shipped ledger file: its class bands and pair bands per phase, and its cards."""

    model_config = ConfigDict(frozen=True)
    name: str
    classes: dict[tuple[str, str], tuple[float, float, int]]  # (phase, class) → low, high, pairs
    pairs: dict[tuple[str, str, str], tuple[float, float, int]]  # (phase, source, target) → …
    cards: frozenset[str]


def read_shipped(path: Path) -> ShippedLedger:
    """A ledger CSV written by `harness ledger --out` (the project's own file)."""
    classes: dict[tuple[str, str], tuple[float, float, int]] = {}
    pairs: dict[tuple[str, str, str], tuple[float, float, int]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["band_low"] == "" and row["pair_band_low"] == "":
                continue  # too few keys to state a band
            if row["table"] == "ledger":
                classes[(row["phase"], row["klass"])] = (
                    float(row["band_low"]), float(row["band_high"]), int(row["pairs"]),
                )  # fmt: skip
            else:
                key = (row["pair_phase"], row["pair_source"], row["pair_target"])
                pairs[key] = (
                    float(row["pair_band_low"]), float(row["pair_band_high"]),
                    int(row["pair_pairs"]),
                )  # fmt: skip
    cards = frozenset(c for _, s, t in pairs for c in (s, t))
    return ShippedLedger(name=path.name, classes=classes, pairs=pairs, cards=cards)


def read_ledger_lines(path: Path) -> tuple[list[ledger.LedgerLine], str]:
    """The ledger's lines of a CSV written by `harness ledger --out`, and its data source."""
    lines: list[ledger.LedgerLine] = []
    sources: dict[str, None] = {}
    fields = ledger.LedgerLine.model_fields
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            sources[row["data_source"]] = None
            if row["table"] == "ledger":
                values = {k: row[k] if row[k] != "" else None for k in fields}
                lines.append(ledger.LedgerLine.model_validate(values))
    return lines, "; ".join(s for s in sources if s)


@cache
def shipped_ledgers() -> tuple[ShippedLedger, ...]:
    return tuple(read_shipped(SHIPPED / name) for name in SHIPPED_LEDGERS)


class Bands:
    """The band of a (phase, source → target) projection: your runs first, then the shipped
    ledger (the module docstring says the order)."""

    def __init__(
        self, own: Sequence[ledger.PairError], shipped: Sequence[ShippedLedger] | None = None
    ) -> None:
        self.own = list(own)
        self.shipped = tuple(shipped_ledgers() if shipped is None else shipped)

    def band(self, phase: str, source: str, target: str) -> Band | None:
        """None where no ledger has keys enough to state a band for the phase."""
        if source == target:
            return EXACT
        klass = ledger.card_class(source, target)
        mine = [e for e in self.own if e.phase == phase]
        pair = [e.ratio for e in mine if (e.source, e.target) == (source, target)]
        if len(pair) >= MIN_OWN_PAIRS:
            low, high = ledger.band(pair)
            return Band(
                low=low, high=high, source=f"your runs: {len(pair)} pairs {source}→{target}"
            )
        same = [e.ratio for e in mine if e.klass == klass]
        if len(same) >= MIN_OWN_PAIRS:
            low, high = ledger.band(same)
            return Band(low=low, high=high, source=f"your runs: {klass}, {len(same)} pairs")
        return self._shipped(phase, source, target, klass)

    def _shipped(self, phase: str, source: str, target: str, klass: str) -> Band | None:
        book = next((b for b in self.shipped if target in b.cards), self.shipped[0])
        where = f"shipped {SHIPPED_LEDGERS[book.name]}"
        if (phase, source, target) in book.pairs:
            low, high, n = book.pairs[(phase, source, target)]
            return Band(low=low, high=high, source=f"{where}: {source}→{target} ({n} pairs)")
        stated = klass if (phase, klass) in book.classes else "all"
        if (phase, stated) not in book.classes:
            return None
        low, high, n = book.classes[(phase, stated)]
        unseen = "" if target in book.cards else f"; no {target} in it"
        few = "" if stated == klass else f"; too few {klass} keys for a band"
        return Band(low=low, high=high, source=f"{where}: {stated} ({n} pairs){unseen}{few}")


def own_errors(points: pd.DataFrame) -> list[ledger.PairError]:
    """Leave-one-card-out errors over your rows: the same configuration measured on ≥ 2 GPU
    cards (the rows ``candidates`` keeps)."""
    return ledger.leave_one_card_out(own_measured(points))


def own_measured(points: pd.DataFrame) -> list[ledger.Measured]:
    """Your GPU rows' decode and prefill figures as the ledger reads them (the key: engine,
    model and its KV dtype, weights, one card, batch, context, output tokens)."""
    measured: list[ledger.Measured] = []
    for r in points.to_dict(orient="records"):
        if catalog.gpu(str(r["gpu"])).vendor == "cpu":
            continue
        key: ledger.Key = (
            str(r["backend"]), f"{r['model']}|kv={r['kv_cache_dtype']}", str(r["quantization"]),
            1, int(r["batch"]), int(r["context"]), int(r["output_tokens"]),
        )  # fmt: skip
        for phase, column in (("decode", "decode_tok_s"), ("prefill", "prefill_tok_s")):
            value = r.get(column)
            if value is not None and value == value and value > 0:
                one = ledger.Measured(
                    phase=phase, key=key, card=str(r["gpu"]), tok_s=float(value),
                    roofline_tok_s=None,
                )  # fmt: skip
                measured.append(one)
    return measured


# --- projection of measured rows ----------------------------------------------------------------


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


class Projection(BaseModel):
    """One measured configuration on one card: measured, projected, or skipped with its reason."""

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
    prefill_tok_s: float | None = None
    prefill_band: Band | None = None
    fits: bool | None = None
    memory: str = ""
    kv_room_gib: float | None = None
    largest_batch: int | None = None
    setup_s: float | None = None  # the measured row's model load + engine start
    skipped: str = ""
    flags: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        return (
            not self.skipped and bool(self.fits) and self.decode_tok_s is not None
            and self.decode_band is not None
        )  # fmt: skip

    def decode_range(self) -> tuple[float, float]:
        assert self.decode_tok_s is not None and self.decode_band is not None
        return self.decode_tok_s * self.decode_band.low, self.decode_tok_s * self.decode_band.high


def point_on(row: Row, card: GpuSpec, batch: int | None = None) -> Point:
    """The row's configuration as a point on the card's target."""
    return Point(
        model=str(row["model"]), revision=str(row.get("revision") or "main"),
        backend=row["backend"], quantization=row["quantization"],
        kv_cache_dtype=row["kv_cache_dtype"], batch=batch or int(row["batch"]),
        context=int(row["context"]), output_tokens=int(row["output_tokens"]),
        target=TARGET_KIND[card.vendor], repeats=int(row.get("repeats") or 5),
    )  # fmt: skip


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


def project_row(row: Row, card: GpuSpec, bands: Bands) -> Projection:
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
    if not same:
        decode = None if decode is None else project.project_decode(decode, source, card)
        if prefill is not None:
            prefill = project.project_prefill(prefill, source, card, quantization)
    point = point_on(row, card)
    plan = plan_point(point, card)
    return Projection(
        **base,
        decode_tok_s=decode, decode_band=bands.band("decode", source.name, card.name),
        prefill_tok_s=prefill, prefill_band=bands.band("prefill", source.name, card.name),
        fits=plan.fits, memory=plan.reason,
        kv_room_gib=plan.capacity_gib - (plan.total_gib - plan.kv_cache_gib),
        largest_batch=largest_batch(point, card),
        flags=_flags(row, source, card, same),
    )  # fmt: skip


def _number(value: object) -> float | None:
    if value is None or not isinstance(value, int | float | np.number) or value != value:
        return None
    return float(value)


def _flags(row: Row, source: GpuSpec, card: GpuSpec, same: bool) -> tuple[str, ...]:
    if same:
        return ()
    out = []
    flavour = project.fp8_flag(source, card, str(row["quantization"]), str(row["kv_cache_dtype"]))
    if flavour:
        out.append(flavour)
    share = _number(row.get("roofline_fraction"))
    if share is not None and share < OVERHEAD_BOUND_FRACTION:
        out.append(f"overhead-bound ({share:.2%} of its roofline): outside the band's data")
    return tuple(out)


def project_all(
    points: pd.DataFrame, cards: Iterable[str], quality_class: str, bands: Bands | None = None
) -> list[Projection]:
    """Every passing row onto every card (its own card included, as measured)."""
    rows = candidates(points, quality_class)
    bands = bands or Bands(own_errors(rows))
    specs = [catalog.gpu(c) for c in dict.fromkeys(cards)]
    out = [project_row(r, c, bands) for r in rows.to_dict(orient="records") for c in specs]
    measured_cards = {(p.model, p.configuration, p.card) for p in out if p.label == MEASURED}
    # a card where the configuration was measured keeps only its measured row
    return [
        p for p in out
        if p.label == MEASURED or (p.model, p.configuration, p.card) not in measured_cards
    ]  # fmt: skip


# --- the ranking --------------------------------------------------------------------------------


class RankLine(BaseModel):
    """One tariff's card for one model and package length: its cheapest configuration."""

    model_config = ConfigDict(frozen=True)
    model: str
    days: int
    provider: str
    card: str
    gpus_per_node: int
    label: str
    configuration: str = ""
    usd_per_mtok: float | None = None
    usd_low: float | None = None
    usd_high: float | None = None
    band_source: str = ""
    note: str = ""
    projection: Projection | None = None

    @property
    def measured(self) -> bool:
        return self.label == MEASURED


def price(
    projection: Projection, tariff: Tariff, days: int, utilisation: float
) -> tuple[float, float, float]:
    """(low, central, high) $/Mtok of output on the tariff's package of ``days``."""
    package = next(p for p in tariff.packages if p.days == days)
    hour = pricing.package_usd_per_hour(
        tariff.package_price_usd(package), days, utilisation, 1 / tariff.gpus_per_node
    )
    slow, fast = projection.decode_range()
    assert projection.decode_tok_s is not None
    costs = pricing.usd_per_mtok(hour, np.array([fast, projection.decode_tok_s, slow]))
    return float(costs[0]), float(costs[1]), float(costs[2])


def ranking(
    projections: Sequence[Projection], tariffs: TariffTable, utilisation: float
) -> dict[tuple[str, int], list[RankLine]]:
    """Per (model, package days): one line per tariff with such a package, cheapest first."""
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
    # the measured row wins on its own card; else the cheapest central figure
    (low, central, high), best = min(priced, key=lambda x: (x[1].label != MEASURED, x[0][1]))
    assert best.decode_band is not None
    return RankLine(
        **base, label=best.label, configuration=best.configuration, usd_per_mtok=central,
        usd_low=low, usd_high=high, band_source=best.decode_band.source,
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
    """Robust, or the rentals that decide: every projected card in contention measured (a
    measured figure has no band; while one projected card stays in contention, its band can
    still overlap), each on its cheapest hourly tariff for the plan's budget of its
    configurations in contention."""
    priced = [x for x in lines if x.usd_per_mtok is not None]
    if not priced:
        return None
    best = priced[0]
    assert best.usd_high is not None
    where = f"{best.card} ({best.provider})"
    rivals = [x for x in priced[1:] if (x.usd_low or 0.0) <= best.usd_high]
    if not rivals:
        return Verdict(
            robust=True,
            cheapest=where,
            text=f"robust: {where}'s upper bound is below every other card's lower bound",
        )
    names = ", ".join(f"{x.card} ({x.provider})" for x in rivals)
    lead = f"not robust: {names} overlap {where}"
    cards = dict.fromkeys(x.card for x in [best, *rivals] if not x.measured)
    trials = [t for c in cards if (t := _trial(c, best, projections, tariffs, utilisation))]
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


def _duration(hours: float) -> str:
    if hours < 1 / 60:
        return f"{hours * 3600:.0f} s"
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.2f} h"


def _trial(
    card_name: str,
    best: RankLine,
    projections: Sequence[Projection],
    tariffs: TariffTable,
    utilisation: float,
) -> Trial | None:
    """Measuring the card's configurations in contention (its low ≤ the cheapest's high on any
    of its tariffs' package of that length) on its cheapest hourly tariff."""
    assert best.usd_high is not None
    mine = [p for p in projections if p.card == card_name and p.model == best.model and p.usable]
    on = [t for t in tariffs.for_gpu(card_name) if any(x.days == best.days for x in t.packages)]
    contending = [
        p for p in mine if any(price(p, t, best.days, utilisation)[0] <= best.usd_high for t in on)
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
    own = own_errors(rows)
    projections = project_all(points, [t.gpu for t in tariffs.tariffs], quality_class, Bands(own))
    ranked = ranking(projections, tariffs, utilisation)
    verdicts = {k: verdict(v, projections, tariffs, utilisation) for k, v in ranked.items()}
    return BeforeYouRent(projections=projections, ranking=ranked, verdicts=verdicts,
                         own_pairs=len(own))  # fmt: skip
