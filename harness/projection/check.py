"""`harness ledger check`: a ledger's bands scored on held-out measurements, and the ranking τ
over cost beside the one over throughput.

Every (source → target) pair of a key measured on two cards or more in the held-out CSV is
projected as the ledger does (``ledger.leave_one_card_out``) and given the band a renter would
be shown for it (``BookBands``: the book's own rule, ``book.Book.band``: none outside its data's
scope, for a card or stack it never measured, or from a cell its held-out check does not
validate). Per phase and summary (same vendor, cross vendor, all):
- unbanded %: the share of pairs given no band;
- coverage %: the share of banded pairs whose measured ÷ projected lies in the band;
- MAPE %: mean |projected − measured| / measured over every pair;
- τ and cost τ: Kendall τ between projected and measured tok/s, and between projected and
  measured USD per Mtok of output (the card's cheapest tariff, per card-hour, ÷ tok/s), over
  the cards of each key with ≥ 3 cards (each card projected as the geometric mean of its
  projections from the others; cost: over its cards with a tariff, ≥ 3 of them), averaged over
  those keys.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from statistics import fmean

from pydantic import BaseModel, ConfigDict

from harness.projection import book, ledger
from harness.projection.external import STATIC, ExternalRow
from harness.spec.tariffs import TariffTable

BandOf = Callable[[ledger.PairError], tuple[float, float] | None]  # a pair → its band, or none
SECONDS_PER_HOUR = 3600
SHOWN_REASONS = 3  # the most common reasons a pair got no band, named in one line
TOKENS_PER_MTOK = 1e6


def card_prices(table: TariffTable) -> dict[str, float]:
    """USD per card-hour of each card: its cheapest tariff's node price ÷ cards per node."""
    prices: dict[str, float] = {}
    for tariff in table.tariffs:
        price = tariff.hourly_usd / tariff.gpus_per_node
        prices[tariff.gpu] = min(price, prices.get(tariff.gpu, math.inf))
    return prices


def usd_per_mtok(price_per_hour: float, tok_s: float) -> float:
    return price_per_hour / (tok_s * SECONDS_PER_HOUR) * TOKENS_PER_MTOK


class KeyTau(BaseModel):
    """One key's ranking: τ over throughput, and over cost where every card has a price."""

    model_config = ConfigDict(frozen=True)
    phase: str
    tau: float
    cost_tau: float | None


def key_taus(errors: Iterable[ledger.PairError], prices: Mapping[str, float]) -> list[KeyTau]:
    """Per key with ≥ 3 cards: Kendall τ of the cards' projected against measured throughput,
    and of their projected against measured cost (over the cards with a price, ≥ 3)."""
    logs: dict[tuple[str, ledger.Key], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    truth: dict[tuple[str, ledger.Key], dict[str, float]] = defaultdict(dict)
    for e in errors:
        logs[(e.phase, e.key)][e.target].append(math.log(e.projected))
        truth[(e.phase, e.key)][e.target] = e.measured
    out: list[KeyTau] = []
    for (phase, key), per_card in sorted(logs.items()):
        cards = sorted(per_card)
        if len(cards) < 3:
            continue
        guess = [math.exp(fmean(per_card[c])) for c in cards]
        measured = [truth[(phase, key)][c] for c in cards]
        priced = [i for i, c in enumerate(cards) if c in prices]
        cost_tau = None
        if len(priced) >= 3:
            cost_tau = ledger.kendall_tau(
                [usd_per_mtok(prices[cards[i]], guess[i]) for i in priced],
                [usd_per_mtok(prices[cards[i]], measured[i]) for i in priced],
            )
        out.append(KeyTau(phase=phase, tau=ledger.kendall_tau(guess, measured), cost_tau=cost_tau))
    return out


class CheckLine(BaseModel):
    """One (phase, class) line of the check."""

    model_config = ConfigDict(frozen=True)
    phase: str
    klass: str
    pairs: int
    banded: int
    unbanded_pct: float
    coverage_pct: float | None  # None: no pair was given a band
    mape_pct: float
    tau: float | None
    cost_tau: float | None
    tau_keys: int
    cost_tau_keys: int


def check(
    measured: Sequence[ledger.Measured], band_of: BandOf, prices: Mapping[str, float]
) -> list[CheckLine]:
    """The ledger's bands (``band_of``) scored on held-out measurements."""
    errors = ledger.leave_one_card_out(measured)
    taus = key_taus(errors, prices)
    lines: list[CheckLine] = []
    for phase in ledger.PHASES:
        for klass in ledger.SUMMARIES:
            chosen = [e for e in errors if e.phase == phase and klass in ("all", e.klass)]
            if chosen:
                mine = [t for t in taus if t.phase == phase] if klass == "all" else []
                lines.append(_line(phase, klass, chosen, band_of, mine))
    return lines


def _line(
    phase: str,
    klass: str,
    errors: list[ledger.PairError],
    band_of: BandOf,
    taus: list[KeyTau],
) -> CheckLine:
    bands = [band_of(e) for e in errors]
    inside = [b[0] <= e.ratio <= b[1] for e, b in zip(errors, bands, strict=True) if b is not None]
    costs = [t.cost_tau for t in taus if t.cost_tau is not None]
    return CheckLine(
        phase=phase, klass=klass, pairs=len(errors), banded=len(inside),
        unbanded_pct=100 * (len(errors) - len(inside)) / len(errors),
        coverage_pct=100 * sum(inside) / len(inside) if inside else None,
        mape_pct=fmean(ledger.ape(e.projected, e.measured) for e in errors),
        tau=fmean(t.tau for t in taus) if taus else None,
        cost_tau=fmean(costs) if costs else None, tau_keys=len(taus), cost_tau_keys=len(costs),
    )  # fmt: skip


def books_by_scenario(name: str, rows: Sequence[ExternalRow]) -> dict[str, book.Book]:
    """A ledger per scenario of the rows (static, offline, server), each fitted apart: unlike
    regimes are never pooled."""
    scenarios = list(dict.fromkeys(r.scenario for r in rows))
    return {
        scenario: book.fit(
            name if len(scenarios) == 1 else f"{name} [{scenario}]",
            ledger.observations([r for r in rows if r.scenario == scenario]),
            scenario,
        )
        for scenario in scenarios
    }


def scope_lines(name: str, rows: Sequence[ExternalRow], excluded: Collection[str]) -> list[str]:
    """The range of each scenario's data: what a projection must lie in to get a band."""
    kept = [r for r in rows if r.gpu not in excluded]
    return [
        f"range of its data (a projection outside it gets no band): {lender.scope_text()}"
        for lender in books_by_scenario(name, kept).values()
        if lender.scopes
    ]


class BookBands:
    """The band a ledger lends each held-out pair (None: it lends none), and why it lent none.
    A pair asks the ledger of its own scenario, else the first (which says it lies outside)."""

    def __init__(self, books: Mapping[str, book.Book], rows: Sequence[ExternalRow]) -> None:
        self.books = dict(books)
        self.scenarios = {m.key: r.scenario for r in rows for m in ledger.observations([r])}
        self.reasons: dict[tuple[str, ledger.Key, str, str], str] = {}

    def band_of(self, pair: ledger.PairError) -> tuple[float, float] | None:
        scenario = self.scenarios.get(pair.key, STATIC)
        lender = self.books.get(scenario) or next(iter(self.books.values()))
        got = book.pair_band(lender, pair, scenario)
        if isinstance(got, str):
            self.reasons[(pair.phase, pair.key, pair.source, pair.target)] = got
            return None
        return got.low, got.high

    def unbanded_text(self) -> str:
        """One line: the pairs given no band, by reason, most first ('' for none)."""
        if not self.reasons:
            return ""
        counts: dict[str, int] = defaultdict(int)
        for why in self.reasons.values():
            counts[why] += 1
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])
        shown = " | ".join(f"{n}: {why}" for why, n in ranked[:SHOWN_REASONS])
        more = len(ranked) - SHOWN_REASONS
        return f"{len(self.reasons)} pairs got no band. {shown}" + (
            f" | and {more} other reasons" if more > 0 else ""
        )
