"""The package that fits a traffic: every tariff's options for a model's cheapest configuration,
measured or projected (``harness.projection.rent``).

Traffic (``fit_traffic``), T output tokens a day, per tariff and option (each package, and hourly
billing), with the card's cheapest configuration (replicas n = cards ÷ cards used) at the rate r
it is sized at (``sizing_rate``): measured, the measured figure; projected with a band, **the
band's low end** (projected × low: a fleet sized on the centre falls short half the time);
projected without a validated band, the projected figure, said so:
- one node's capacity a day C = r × n × (86,400 − setup ÷ days) for a package (the setup, the
  run's measured model load + engine start, paid again on each rental), r × n × 86,400 hourly;
- nodes = ⌈T ÷ C⌉; utilisation per node = T ÷ (nodes × C) (each node carries an equal share);
  a package whose setup takes the whole package (C ≤ 0) is not an option, said so;
- package: $/day = nodes × package price ÷ days;
- hourly: each node is started once a day, busy T ÷ (nodes × r × n) s plus the setup, billed
  rounded up to the tariff's unit (at most 24 h), plus ``storage_usd_per_day`` × the stopped
  share of the day;
- the cheapest option, the runner-up and the margin; the package's break-even utilisation against
  hourly billing is ``pricing.breakeven_utilisation`` (without setup or storage).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from harness.projection.rent import MEASURED, SECONDS_PER_DAY, Projection, billed_seconds
from harness.results import pricing
from harness.spec.tariffs import Tariff, TariffTable

LOW_END = "the band's low end"
UNBANDED = "the projected figure (no validated band)"


class Option(BaseModel):
    """One (tariff, package or hourly) priced for a traffic."""

    model_config = ConfigDict(frozen=True)
    provider: str
    card: str
    package: str  # "7 days" or "hourly"
    label: str
    configuration: str
    sized_at: str  # which figure sized it (``sizing_rate``)
    tok_s: float  # that figure, per replica
    nodes: int
    utilisation: float  # per node
    setup_s: float
    usd_per_day: float
    usd_per_mtok: float
    breakeven_utilisation: float | None


class TrafficFit(BaseModel):
    """Every option, cheapest first, and one line per package that could not be an option."""

    model_config = ConfigDict(frozen=True)
    options: list[Option]
    not_options: list[str]


def sizing_rate(p: Projection) -> tuple[float, str]:
    """(tok/s, which figure) a fleet is sized at: the measured figure, the band's low end, or
    the projected figure where no validated band exists."""
    assert p.decode_tok_s is not None
    if p.label == MEASURED:
        return p.decode_tok_s, MEASURED
    if p.decode_band is None:
        return p.decode_tok_s, UNBANDED
    return p.decode_tok_s * p.decode_band.low, LOW_END


def node_capacity_per_day(
    tok_s: float, replicas: float, setup_s: float, days: float | None
) -> float:
    """Tokens one node serves a day: r × n × (86,400 − setup ÷ days); hourly (days None): the
    setup is paid within each day's billed hours instead."""
    lost = 0.0 if days is None else setup_s / days
    return tok_s * replicas * max(SECONDS_PER_DAY - lost, 0.0)


def _nodes(traffic: float, capacity: float) -> tuple[int, float]:
    """(nodes, utilisation per node): ⌈T ÷ C⌉ and T ÷ (nodes × C)."""
    nodes = max(1, math.ceil(traffic / capacity - 1e-9))
    return nodes, traffic / (nodes * capacity)


def package_option(tariff: Tariff, days: int, p: Projection, traffic: float) -> Option | str:
    """The package's option, or why it is none (the setup takes the whole package)."""
    package = next(x for x in tariff.packages if x.days == days)
    price_usd = tariff.package_price_usd(package)
    setup = p.setup_s or 0.0
    rate, sized_at = sizing_rate(p)
    capacity = node_capacity_per_day(rate, tariff.gpus_per_node, setup, days)
    if capacity <= 0:
        return (
            f"{tariff.gpu} ({tariff.provider}) {days} days: the setup ({setup:,.0f} s) takes "
            f"the whole package ({days * SECONDS_PER_DAY:,} s): not an option"
        )
    nodes, utilisation = _nodes(traffic, capacity)
    per_day = nodes * price_usd / days
    breakeven = float(pricing.breakeven_utilisation(price_usd, tariff.hourly_usd, days))
    return Option(
        provider=tariff.provider, card=tariff.gpu, package=f"{days} days", label=p.label,
        configuration=p.configuration, sized_at=sized_at, tok_s=rate, nodes=nodes,
        utilisation=utilisation, setup_s=setup, usd_per_day=per_day,
        usd_per_mtok=per_day / traffic * 1e6, breakeven_utilisation=breakeven,
    )  # fmt: skip


def hourly_option(tariff: Tariff, p: Projection, traffic: float) -> Option:
    setup = p.setup_s or 0.0
    rate, sized_at = sizing_rate(p)
    capacity = node_capacity_per_day(rate, tariff.gpus_per_node, setup, None)
    nodes, utilisation = _nodes(traffic, capacity)
    busy = traffic / (nodes * rate * tariff.gpus_per_node)
    billed = min(billed_seconds(busy + setup, tariff.billing), SECONDS_PER_DAY)
    stopped = 1 - billed / SECONDS_PER_DAY
    per_node = billed / 3600 * tariff.hourly_usd + (tariff.storage_usd_per_day or 0.0) * stopped
    per_day = nodes * per_node
    return Option(
        provider=tariff.provider, card=tariff.gpu, package=f"hourly (per {tariff.billing})",
        label=p.label, configuration=p.configuration, sized_at=sized_at, tok_s=rate,
        nodes=nodes, utilisation=utilisation, setup_s=setup, usd_per_day=per_day,
        usd_per_mtok=per_day / traffic * 1e6, breakeven_utilisation=None,
    )  # fmt: skip


def fit_traffic(
    projections: Sequence[Projection], tariffs: TariffTable, model: str, traffic: float
) -> TrafficFit:
    """Every option for the model at ``traffic`` output tokens a day, cheapest first."""
    if not traffic > 0 or not math.isfinite(traffic):
        raise ValueError(f"traffic must be a finite number of tokens a day > 0, got {traffic!r}")
    options: list[Option] = []
    not_options: list[str] = []
    for tariff in tariffs.tariffs:
        usable = [p for p in projections if p.model == model and p.card == tariff.gpu and p.usable]
        if not usable:
            continue
        # the measured row on its own card, else the highest rate it is sized at (cheapest)
        best = max(usable, key=lambda p: (p.label == MEASURED, sizing_rate(p)[0]))
        for x in tariff.packages:
            got = package_option(tariff, x.days, best, traffic)
            if isinstance(got, Option):
                options.append(got)
            else:
                not_options.append(got)
        options.append(hourly_option(tariff, best, traffic))
    return TrafficFit(options=sorted(options, key=lambda o: o.usd_per_day), not_options=not_options)
