"""The error ledger: how wrong a projection is, measured by leaving one card out.

For every key (engine, engine version, model, weights, cards, load, input and output tokens)
measured on two or more card types, each card in turn is projected from each of the others
(``project``); the error of each (source → target) pair is recorded per phase:

- decode: aggregate output tok/s, from ``output_tok_s``, else load × 1000 / ``tpot_ms``, else
  load × output_tokens / ``e2e_s`` (a static batch's latency, prefill included: kept only at a
  load ≤ DECODE_MAX_LOAD, where prefill is a small share);
- prefill: load × input_tokens / (``ttft_ms`` / 1000).

The band is fitted per **cell**: (phase, dense or MoE, direction), the direction being the
vendors' order (``nvidia → amd`` is not ``amd → nvidia``: a software stack that runs at half its
roofline is a direction, not noise). Within a cell it is split-conformal: a projection P carries
[P × low, P × high], low and high the k-th largest and k-th smallest measured ÷ projected of the
n pairs it is fitted on, k = ⌈(n + 1) × (1 + STATED_COVERAGE) ÷ 2⌉ (each tail fitted apart, at
most (1 − STATED_COVERAGE) ÷ 2 outside on each side for a pair exchangeable with them); its
median ratio re-centres the projection. A key's pairs share their measurements, so the keys must
be enough: fewer than k needs (9 keys at 80 %) state no band.

**The held-out check leaves a card out**, the renter's unknown being the card and its software
stack: per cell and per card C, the band is fitted on the pairs that do not touch C (every engine
on C goes with it) and scored on the pairs projected onto C. Coverage is reported per card, per
pair, per cell and overall; a cell is **validated** when its held-out coverage is no more than
TOLERANCE_POINTS below the stated level. Where no band could be fitted without C, C's pairs count
as unbanded.

Kendall τ between the projected and the measured figures over the cards of each key with ≥ 3
cards (each card projected as the geometric mean of its projections from the others) and the pure
roofline's MAPE and τ on the same keys (its ceiling taken as the prediction) are beside them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from fractions import Fraction
from statistics import fmean, median

from pydantic import BaseModel, ConfigDict

from harness.projection import project
from harness.projection.external import ExternalRow
from harness.spec import catalog

PHASES = ("decode", "prefill")
SUMMARIES = ("same vendor", "cross vendor", "all")
DECODE_MAX_LOAD = 16
STATED_COVERAGE = Fraction(4, 5)  # the band's target: 80 % of held-out figures inside it
TOLERANCE_POINTS = 5.0  # a cell whose held-out coverage falls further below is not validated

Key = tuple[str, str, str, int, int, int, int]  # engine, model, weights, gpus, load, in, out


class Measured(BaseModel):
    """One card's figure for one key and phase (tok/s), with its pure roofline where known."""

    model_config = ConfigDict(frozen=True)
    phase: str
    key: Key
    card: str
    tok_s: float
    roofline_tok_s: float | None
    arch: str = "dense"  # dense or MoE (``arch_of``)
    kv_cache: str = "16-bit"  # the KV cache's format (an external CSV states none: 16-bit)


class PairError(BaseModel):
    """A held-out card's figure projected from one other card."""

    model_config = ConfigDict(frozen=True)
    phase: str
    key: Key
    source: str
    target: str
    klass: str
    measured: float
    projected: float
    roofline: float | None
    arch: str = "dense"

    @property
    def ratio(self) -> float:
        return self.measured / self.projected

    @property
    def direction(self) -> str:
        return direction(self.source, self.target)

    @property
    def cell(self) -> tuple[str, str, str]:
        return self.phase, self.arch, self.direction


def card_class(source: str, target: str) -> str:
    same = catalog.gpu(source).vendor == catalog.gpu(target).vendor
    return "same vendor" if same else "cross vendor"


def direction(source: str, target: str) -> str:
    """The vendors in projection order, e.g. ``nvidia → amd``."""
    return f"{catalog.gpu(source).vendor} → {catalog.gpu(target).vendor}"


def arch_of(model: str) -> str:
    """MoE where the catalog's architecture has experts, else dense (a model the catalog lacks
    counts as dense: the shipped extract's such models are dense 6–7B models)."""
    arch = catalog.catalog_models().get(model)
    return "MoE" if arch is not None and arch.num_experts > 1 else "dense"


def decode_figure(row: ExternalRow) -> float | None:
    if row.output_tok_s is not None:
        return row.output_tok_s
    if row.tpot_ms is not None:
        return row.load * 1000 / row.tpot_ms
    tokens = row.output_tokens or 0
    if row.e2e_s is not None and row.load <= DECODE_MAX_LOAD and tokens >= 2:
        return row.load * tokens / row.e2e_s
    return None


def prefill_figure(row: ExternalRow) -> float | None:
    if row.ttft_ms is None or row.input_tokens is None:
        return None
    return row.load * row.input_tokens / (row.ttft_ms / 1000)


def _roofline(phase: str, row: ExternalRow) -> float | None:
    """The pure roofline for the row, where the model's architecture is in the catalog."""
    arch = catalog.catalog_models().get(row.model)
    weights = "fp16" if row.weights in ("fp16", "float16") else row.weights
    if arch is None or weights not in ("fp16", "bf16", "fp8") or not row.input_tokens:
        return None
    card = catalog.gpu(row.gpu)
    if project.cannot_run(card, weights):
        return None
    if phase == "prefill":
        return project.prefill_roofline_tok_s(card, arch, weights, row.gpus)
    return project.decode_roofline_tok_s(
        card, arch, weights, row.load, row.input_tokens, row.output_tokens or 1, row.gpus
    )


def observations(rows: Iterable[ExternalRow]) -> list[Measured]:
    """Each row's figure per phase; the first row of a (phase, key, card) only."""
    seen: set[tuple[str, Key, str]] = set()
    out: list[Measured] = []
    for row in rows:
        key: Key = (row.stack, row.model, row.weights, row.gpus, row.load,
                    row.input_tokens or 0, row.output_tokens or 0)  # fmt: skip
        for phase, figure in (("decode", decode_figure(row)), ("prefill", prefill_figure(row))):
            if figure is None or (phase, key, row.gpu) in seen:
                continue
            seen.add((phase, key, row.gpu))
            out.append(Measured(phase=phase, key=key, card=row.gpu, tok_s=figure,
                                roofline_tok_s=_roofline(phase, row),
                                arch=arch_of(row.model)))  # fmt: skip
    return out


def _by_key(measured: Iterable[Measured]) -> dict[tuple[str, Key], list[Measured]]:
    groups: dict[tuple[str, Key], list[Measured]] = defaultdict(list)
    for m in measured:
        groups[(m.phase, m.key)].append(m)
    return {k: v for k, v in groups.items() if len(v) >= 2}


def projected(phase: str, weights: str, source: Measured, target: str) -> float | None:
    src, dst = catalog.gpu(source.card), catalog.gpu(target)
    gpus = source.key[3]
    if phase == "decode":
        return project.project_decode(source.tok_s, src, dst, gpus)
    return project.project_prefill(source.tok_s, src, dst, weights, gpus)


def leave_one_card_out(measured: Iterable[Measured]) -> list[PairError]:
    """Every (source → held-out target) projection of every key measured on ≥ 2 cards."""
    errors: list[PairError] = []
    for (phase, key), cards in sorted(_by_key(measured).items()):
        for target in cards:
            for source in cards:
                if source.card == target.card:
                    continue
                guess = projected(phase, key[2], source, target.card)
                if guess is None:
                    continue
                errors.append(
                    PairError(
                        phase=phase, key=key, source=source.card, target=target.card,
                        klass=card_class(source.card, target.card), measured=target.tok_s,
                        projected=guess, roofline=target.roofline_tok_s, arch=target.arch,
                    )
                )  # fmt: skip
    return errors


def ape(predicted: float, measured: float) -> float:
    """|predicted − measured| / measured × 100 (%)."""
    return abs(predicted - measured) / measured * 100


def conformal_rank(n: int) -> int:
    """⌈(n + 1) × (1 + STATED_COVERAGE) ÷ 2⌉: the rank, from either end, of the ratio that bounds
    a new one on that side but (1 − STATED_COVERAGE) ÷ 2 of the time (above n: no band can be
    stated from n)."""
    return math.ceil((n + 1) * (1 + STATED_COVERAGE) / 2)


def band(ratios: Sequence[float]) -> tuple[float, float]:
    """(low, high) of measured ÷ projected: a projection P carries the band [P × low, P × high],
    low the conformal_rank-th largest ratio and high the conformal_rank-th smallest."""
    rank = conformal_rank(len(ratios))
    if rank > len(ratios):
        raise ValueError(f"{len(ratios)} ratios are too few to state a band")
    ordered = sorted(ratios)
    return ordered[len(ratios) - rank], ordered[rank - 1]


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's τ-a: (concordant − discordant) pairs ÷ all pairs (a tie is neither)."""
    n = len(xs)
    score = 0
    for i in range(n):
        for j in range(i + 1, n):
            score += _sign(xs[i] - xs[j]) * _sign(ys[i] - ys[j])
    return score / (n * (n - 1) / 2)


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def enough_keys(errors: Sequence[PairError]) -> bool:
    keys = len({e.key for e in errors})
    return keys > 0 and conformal_rank(keys) <= keys


# --- the held-out check: leave a card out ---------------------------------------------------


class Scored(BaseModel):
    """One pair scored by the band of its cell fitted without its target card."""

    model_config = ConfigDict(frozen=True)
    error: PairError
    inside: bool | None  # None: no band could be fitted without the target card


def held_out(errors: Sequence[PairError]) -> list[Scored]:
    """Every pair, scored by the band of its cell fitted on the pairs that do not touch its
    target card (the card left out, with every engine on it)."""
    cells: dict[tuple[str, str, str], list[PairError]] = defaultdict(list)
    for e in errors:
        cells[e.cell].append(e)
    out: list[Scored] = []
    for _, cell in sorted(cells.items()):
        for card in sorted({e.target for e in cell}):
            fit = [e for e in cell if card not in (e.source, e.target)]
            fitted = band([e.ratio for e in fit]) if enough_keys(fit) else None
            for e in cell:
                if e.target != card:
                    continue
                inside = None if fitted is None else fitted[0] <= e.ratio <= fitted[1]
                out.append(Scored(error=e, inside=inside))
    return out


def coverage_pct(scored: Sequence[Scored]) -> float | None:
    """The share (%) of the banded pairs inside their held-out band; None for none banded."""
    banded = [s.inside for s in scored if s.inside is not None]
    return 100 * sum(banded) / len(banded) if banded else None


def validated(coverage: float | None) -> bool:
    return coverage is not None and coverage >= float(STATED_COVERAGE * 100) - TOLERANCE_POINTS


class Cell(BaseModel):
    """One (phase, dense or MoE, direction) cell: its band on every pair, its held-out check."""

    model_config = ConfigDict(frozen=True)
    phase: str
    arch: str
    direction: str
    pairs: int
    keys: int
    stacks: frozenset[tuple[str, str]]  # (card, engine) measured in the cell
    low: float | None  # None: too few keys to state a band
    median: float | None
    high: float | None
    held_out_pairs: int  # scored with a band fitted without their target card
    unbanded_pairs: int
    held_out_coverage_pct: float | None
    card_coverage_pct: dict[str, float | None]  # per target card held out

    @property
    def validated(self) -> bool:
        return self.low is not None and validated(self.held_out_coverage_pct)


def cells(errors: Sequence[PairError]) -> dict[tuple[str, str, str], Cell]:
    """Every cell of the pairs, fitted and checked."""
    scored: dict[tuple[str, str, str], list[Scored]] = defaultdict(list)
    for s in held_out(errors):
        scored[s.error.cell].append(s)
    out = {}
    for cell, items in sorted(scored.items()):
        mine = [s.error for s in items]
        ratios = [e.ratio for e in mine]
        low, high = band(ratios) if enough_keys(mine) else (None, None)
        per_card = {
            card: coverage_pct([s for s in items if s.error.target == card])
            for card in sorted({e.target for e in mine})
        }
        out[cell] = Cell(
            phase=cell[0], arch=cell[1], direction=cell[2], pairs=len(mine),
            keys=len({e.key for e in mine}),
            stacks=frozenset((c, e.key[0]) for e in mine for c in (e.source, e.target)),
            low=low, median=None if low is None else median(ratios), high=high,
            held_out_pairs=sum(s.inside is not None for s in items),
            unbanded_pairs=sum(s.inside is None for s in items),
            held_out_coverage_pct=coverage_pct(items), card_coverage_pct=per_card,
        )  # fmt: skip
    return out


# --- the ledger's lines ---------------------------------------------------------------------


def ranking_taus(measured: Iterable[Measured]) -> dict[str, list[tuple[float, float | None]]]:
    """Per phase, per key with ≥ 3 cards: (τ of the leave-one-out projection, τ of the pure
    roofline where every card has one)."""
    out: dict[str, list[tuple[float, float | None]]] = defaultdict(list)
    for (phase, key), cards in sorted(_by_key(measured).items()):
        if len(cards) < 3:
            continue
        guesses: list[float] = []
        for target in cards:
            logs = [
                math.log(g)
                for s in cards
                if s.card != target.card and (g := projected(phase, key[2], s, target.card))
            ]
            guesses.append(math.exp(fmean(logs)) if logs else math.nan)
        if any(math.isnan(g) for g in guesses):
            continue
        truth = [c.tok_s for c in cards]
        ceilings = [c.roofline_tok_s for c in cards]
        roof = None if None in ceilings else kendall_tau([c or 0.0 for c in ceilings], truth)
        out[phase].append((kendall_tau(guesses, truth), roof))
    return out


class LedgerLine(BaseModel):
    """One line of the ledger: a cell (phase, dense or MoE, direction) with its band, or a
    summary over cells (``klass`` same vendor, cross vendor or all; ``arch`` all; no band of its
    own: its held-out coverage pools the pairs of its validated cells, the bands a renter is
    shown; a pair of a cell not validated counts as unbanded)."""

    model_config = ConfigDict(frozen=True)
    phase: str
    klass: str
    arch: str
    pairs: int
    keys: int
    mape_pct: float
    roofline_pairs: int
    mape_same_keys_pct: float | None  # this method, on the keys the roofline has
    roofline_mape_pct: float | None
    models: int
    band_low: float | None  # None: a summary, or too few keys to state a band
    band_median: float | None
    band_high: float | None
    stated_coverage_pct: float
    held_out_coverage_pct: float | None  # leaving the target card out
    held_out_pairs: int
    unbanded_pairs: int
    validated: bool
    held_out_by_card: str  # each target card's own held-out coverage, by name
    tau: float | None
    roofline_tau: float | None
    tau_keys: int


def band_text(line: LedgerLine) -> str:
    """The band as [low, high] with its median, or why there is none."""
    if line.klass in SUMMARIES:
        return "— (a band per direction)"
    if line.band_low is None or line.band_high is None:
        return f"too few keys to state a band: {line.keys}"
    text = f"[{line.band_low:.3f}, {line.band_high:.3f}] median {line.band_median:.3f}"
    return text if line.validated else f"{text}, not validated: measure it"


def ledger(measured: Sequence[Measured]) -> list[LedgerLine]:
    """Per phase: one line per cell, then the summaries (same vendor, cross vendor, all)."""
    errors = leave_one_card_out(measured)
    fitted = cells(errors)
    scored = held_out(errors)
    taus = ranking_taus(measured)
    lines: list[LedgerLine] = []
    for phase in PHASES:
        for (p, arch, way), cell in fitted.items():
            if p == phase:
                chosen = [e for e in errors if e.cell == (p, arch, way)]
                lines.append(_line(phase, way, arch, chosen, [], cell))
        for klass in SUMMARIES:
            chosen = [e for e in errors if e.phase == phase and klass in ("all", e.klass)]
            if not chosen:
                continue
            mine = [
                s if fitted[s.error.cell].validated else Scored(error=s.error, inside=None)
                for s in scored
                if s.error.phase == phase and klass in ("all", s.error.klass)
            ]  # a pair of a cell not validated gets no band: unbanded
            tau = taus.get(phase, []) if klass == "all" else []
            lines.append(_line(phase, klass, "all", chosen, tau, None, mine))
    return lines


def _mape(pairs: list[tuple[float, float]]) -> float | None:
    """MAPE (%) of (predicted, measured) pairs; None for none."""
    return fmean(ape(p, m) for p, m in pairs) if pairs else None


def _line(
    phase: str, klass: str, arch: str, errors: list[PairError],
    taus: list[tuple[float, float | None]], cell: Cell | None, scored: Sequence[Scored] = (),
) -> LedgerLine:  # fmt: skip
    with_roof = [e for e in errors if e.roofline is not None]
    roof_taus = [r for _, r in taus if r is not None]
    if cell is not None:
        check = (cell.held_out_coverage_pct, cell.held_out_pairs, cell.unbanded_pairs)
    else:
        check = (coverage_pct(scored), sum(s.inside is not None for s in scored),
                 sum(s.inside is None for s in scored))  # fmt: skip
    return LedgerLine(
        phase=phase, klass=klass, arch=arch, pairs=len(errors),
        keys=len({e.key for e in errors}),
        mape_pct=fmean(ape(e.projected, e.measured) for e in errors),
        roofline_pairs=len(with_roof),
        mape_same_keys_pct=_mape([(e.projected, e.measured) for e in with_roof]),
        roofline_mape_pct=_mape([(e.roofline, e.measured) for e in with_roof if e.roofline]),
        models=len({e.key[1] for e in errors}),
        band_low=None if cell is None else cell.low,
        band_median=None if cell is None else cell.median,
        band_high=None if cell is None else cell.high,
        stated_coverage_pct=float(STATED_COVERAGE * 100),
        held_out_coverage_pct=check[0], held_out_pairs=check[1], unbanded_pairs=check[2],
        validated=cell is not None and cell.validated,
        held_out_by_card="" if cell is None else by_card_text(cell),
        tau=fmean(t for t, _ in taus) if taus else None,
        roofline_tau=fmean(roof_taus) if roof_taus else None, tau_keys=len(taus),
    )  # fmt: skip


def by_card_text(cell: Cell) -> str:
    """'A100-SXM-80GB 66.3 %, …': each card's pairs inside the band fitted without it."""
    return ", ".join(
        f"{card} {'none banded' if pct is None else f'{pct:.1f} %'}"
        for card, pct in cell.card_coverage_pct.items()
    )


class PairLine(BaseModel):
    """One (phase, source → target) line: its error, and its pairs' coverage by the band of
    their cell fitted without the target card."""

    model_config = ConfigDict(frozen=True)
    phase: str
    source: str
    target: str
    klass: str
    direction: str
    pairs: int
    keys: int
    mape_pct: float
    median_ratio: float  # measured ÷ projected
    held_out_pairs: int
    held_out_coverage_pct: float | None


def pair_table(measured: Sequence[Measured]) -> list[PairLine]:
    groups: dict[tuple[str, str, str], list[Scored]] = defaultdict(list)
    for s in held_out(leave_one_card_out(measured)):
        groups[(s.error.phase, s.error.source, s.error.target)].append(s)
    lines = []
    for (phase, source, target), scored in sorted(groups.items()):
        errs = [s.error for s in scored]
        lines.append(
            PairLine(
                phase=phase, source=source, target=target, klass=errs[0].klass,
                direction=errs[0].direction, pairs=len(errs), keys=len({e.key for e in errs}),
                mape_pct=fmean(ape(e.projected, e.measured) for e in errs),
                median_ratio=median(e.ratio for e in errs),
                held_out_pairs=sum(s.inside is not None for s in scored),
                held_out_coverage_pct=coverage_pct(scored),
            )
        )  # fmt: skip
    return lines


class CardLine(BaseModel):
    """One card left out of one cell: the share of the pairs projected onto it inside the band
    fitted without it (a stack far from its roofline shows here by name)."""

    model_config = ConfigDict(frozen=True)
    phase: str
    arch: str
    direction: str
    card: str
    held_out_coverage_pct: float | None  # None: no band without it


def card_table(measured: Sequence[Measured]) -> list[CardLine]:
    return [
        CardLine(
            phase=c.phase,
            arch=c.arch,
            direction=c.direction,
            card=card,
            held_out_coverage_pct=pct,
        )
        for c in cells(leave_one_card_out(measured)).values()
        for card, pct in c.card_coverage_pct.items()
    ]
