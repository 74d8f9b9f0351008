"""The error ledger: how wrong a projection is, measured by leaving one card out.

For every key (engine, model, weights, cards, load, input and output tokens) measured on two or
more card types, each card in turn is held out and projected from each of the others
(``project``); the error of each (source → target) pair is recorded per phase:

- decode: aggregate output tok/s, from ``output_tok_s``, else load × 1000 / ``tpot_ms``, else
  load × output_tokens / ``e2e_s`` (a static batch's latency, prefill included: kept only at a
  load ≤ DECODE_MAX_LOAD, where prefill is a small share);
- prefill: load × input_tokens / (``ttft_ms`` / 1000).

Figures per phase and class (same vendor, cross vendor, all):
- MAPE = mean |projected − measured| / measured, in %;
- the band, split-conformal by model: a projection P carries [P × low, P × high], low and high
  the k-th largest and k-th smallest measured ÷ projected of the n pairs it is fitted on,
  k = ⌈(n + 1) × (1 + STATED_COVERAGE) ÷ 2⌉ (the finite-sample rank: a new pair exchangeable with
  them falls below low, or above high, at most (1 − STATED_COVERAGE) ÷ 2 of the time each; the
  tails are fitted apart since a card pair's error has a sign). The shipped band is fitted on
  every pair; its held-out coverage is checked by leaving one model out: the band fitted on the
  other models, scored on the pairs of the model left out, pooled over the models. A key's pairs
  share their measurements, so the keys are what must be enough: where a fold's keys are fewer
  than k needs (9 keys at 80 %), or there is one model, no band is stated;
- Kendall τ between the projected and the measured figures over the cards of each key with ≥ 3
  cards (each card projected as the geometric mean of its projections from the others);
- the pure roofline's MAPE and τ on the same keys (its ceiling taken as the prediction).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from fractions import Fraction
from statistics import fmean

from pydantic import BaseModel, ConfigDict

from harness.projection import project
from harness.projection.external import ExternalRow
from harness.spec import catalog

PHASES = ("decode", "prefill")
CLASSES = ("same vendor", "cross vendor", "all")
DECODE_MAX_LOAD = 16
STATED_COVERAGE = Fraction(4, 5)  # the band's target: 80 % of held-out figures inside it

Key = tuple[str, str, str, int, int, int, int]  # engine, model, weights, gpus, load, in, out


class Measured(BaseModel):
    """One card's figure for one key and phase (tok/s), with its pure roofline where known."""

    model_config = ConfigDict(frozen=True)
    phase: str
    key: Key
    card: str
    tok_s: float
    roofline_tok_s: float | None


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

    @property
    def ratio(self) -> float:
        return self.measured / self.projected


def card_class(source: str, target: str) -> str:
    same = catalog.gpu(source).vendor == catalog.gpu(target).vendor
    return "same vendor" if same else "cross vendor"


def decode_figure(row: ExternalRow) -> float | None:
    if row.output_tok_s is not None:
        return row.output_tok_s
    if row.tpot_ms is not None:
        return row.load * 1000 / row.tpot_ms
    if row.e2e_s is not None and row.load <= DECODE_MAX_LOAD and row.output_tokens >= 2:
        return row.load * row.output_tokens / row.e2e_s
    return None


def prefill_figure(row: ExternalRow) -> float | None:
    return None if row.ttft_ms is None else row.load * row.input_tokens / (row.ttft_ms / 1000)


def _roofline(phase: str, row: ExternalRow) -> float | None:
    """The pure roofline for the row, where the model's architecture is in the catalog."""
    arch = catalog.catalog_models().get(row.model)
    weights = "fp16" if row.weights in ("fp16", "float16") else row.weights
    if arch is None or weights not in ("fp16", "bf16", "fp8"):
        return None
    card = catalog.gpu(row.gpu)
    if project.cannot_run(card, weights):
        return None
    if phase == "prefill":
        return project.prefill_roofline_tok_s(card, arch, weights, row.gpus)
    return project.decode_roofline_tok_s(
        card, arch, weights, row.load, row.input_tokens, row.output_tokens, row.gpus
    )


def observations(rows: Iterable[ExternalRow]) -> list[Measured]:
    """Each row's figure per phase; the first row of a (phase, key, card) only."""
    seen: set[tuple[str, Key, str]] = set()
    out: list[Measured] = []
    for row in rows:
        key: Key = (row.engine, row.model, row.weights, row.gpus, row.load,
                    row.input_tokens, row.output_tokens)  # fmt: skip
        for phase, figure in (("decode", decode_figure(row)), ("prefill", prefill_figure(row))):
            if figure is None or (phase, key, row.gpu) in seen:
                continue
            seen.add((phase, key, row.gpu))
            out.append(Measured(phase=phase, key=key, card=row.gpu, tok_s=figure,
                                roofline_tok_s=_roofline(phase, row)))  # fmt: skip
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
                        projected=guess, roofline=target.roofline_tok_s,
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
    """Kendall's τ-a: (concordant − discordant) pairs ÷ all pairs."""
    n = len(xs)
    score = 0
    for i in range(n):
        for j in range(i + 1, n):
            score += int(math.copysign(1, xs[i] - xs[j]) * math.copysign(1, ys[i] - ys[j]))
    return score / (n * (n - 1) / 2)


class Calibration(BaseModel):
    """A band fitted on every pair and its coverage on models left out (None: too few keys)."""

    model_config = ConfigDict(frozen=True)
    band: tuple[float, float] | None
    held_out_coverage_pct: float | None
    models: int


def enough_keys(errors: Sequence[PairError]) -> bool:
    keys = len({e.key for e in errors})
    return conformal_rank(keys) <= keys


def calibrate(errors: Sequence[PairError]) -> Calibration:
    """The band on every pair; its held-out coverage leaving one model out at a time."""
    models = sorted({e.key[1] for e in errors})
    folds = [
        ([e for e in errors if e.key[1] != m], [e for e in errors if e.key[1] == m]) for m in models
    ]
    if len(models) < 2 or not all(enough_keys(fit) for fit, _ in folds):
        return Calibration(band=None, held_out_coverage_pct=None, models=len(models))
    inside = 0
    for fit, held in folds:
        low, high = band([e.ratio for e in fit])  # enough_keys: the pairs are at least the keys
        inside += sum(low <= e.ratio <= high for e in held)
    return Calibration(
        band=band([e.ratio for e in errors]),
        held_out_coverage_pct=100 * inside / len(errors),
        models=len(models),
    )


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
    """One (phase, class) line of the ledger."""

    model_config = ConfigDict(frozen=True)
    phase: str
    klass: str
    pairs: int
    keys: int
    mape_pct: float
    roofline_pairs: int
    mape_same_keys_pct: float | None  # this method, on the keys the roofline has
    roofline_mape_pct: float | None
    models: int
    band_low: float | None  # None: too few keys to state a band
    band_high: float | None
    stated_coverage_pct: float
    held_out_coverage_pct: float | None
    tau: float | None
    roofline_tau: float | None
    tau_keys: int


def band_text(line: LedgerLine) -> str:
    """The band as [low, high], or why there is none."""
    if line.band_low is None or line.band_high is None:
        return f"too few keys to state a band: {line.keys}"
    return f"[{line.band_low:.3f}, {line.band_high:.3f}]"


def ledger(measured: Sequence[Measured]) -> list[LedgerLine]:
    errors = leave_one_card_out(measured)
    taus = ranking_taus(measured)
    lines: list[LedgerLine] = []
    for phase in PHASES:
        for klass in CLASSES:
            chosen = [e for e in errors if e.phase == phase and klass in ("all", e.klass)]
            if not chosen:
                continue
            lines.append(_line(phase, klass, chosen, taus.get(phase, []) if klass == "all" else []))
    return lines


def _mape(pairs: list[tuple[float, float]]) -> float | None:
    """MAPE (%) of (predicted, measured) pairs; None for none."""
    return fmean(ape(p, m) for p, m in pairs) if pairs else None


def _line(
    phase: str, klass: str, errors: list[PairError], taus: list[tuple[float, float | None]]
) -> LedgerLine:
    with_roof = [e for e in errors if e.roofline is not None]
    fitted = calibrate(errors)
    low, high = fitted.band or (None, None)
    roof_taus = [r for _, r in taus if r is not None]
    return LedgerLine(
        phase=phase, klass=klass, pairs=len(errors), keys=len({e.key for e in errors}),
        mape_pct=fmean(ape(e.projected, e.measured) for e in errors),
        roofline_pairs=len(with_roof),
        mape_same_keys_pct=_mape([(e.projected, e.measured) for e in with_roof]),
        roofline_mape_pct=_mape([(e.roofline, e.measured) for e in with_roof if e.roofline]),
        models=fitted.models, band_low=low, band_high=high,
        stated_coverage_pct=float(STATED_COVERAGE * 100),
        held_out_coverage_pct=fitted.held_out_coverage_pct,
        tau=fmean(t for t, _ in taus) if taus else None,
        roofline_tau=fmean(roof_taus) if roof_taus else None, tau_keys=len(taus),
    )  # fmt: skip


class PairLine(BaseModel):
    """One (phase, source → target) line: the band a projection between these cards carries."""

    model_config = ConfigDict(frozen=True)
    phase: str
    source: str
    target: str
    klass: str
    pairs: int
    keys: int
    mape_pct: float
    band_low: float | None  # None: too few keys to state a band
    band_high: float | None
    held_out_coverage_pct: float | None


def pair_table(measured: Sequence[Measured]) -> list[PairLine]:
    groups: dict[tuple[str, str, str], list[PairError]] = defaultdict(list)
    for e in leave_one_card_out(measured):
        groups[(e.phase, e.source, e.target)].append(e)
    lines = []
    for (phase, source, target), errs in sorted(groups.items()):
        fitted = calibrate(errs)
        low, high = fitted.band or (None, None)
        lines.append(
            PairLine(
                phase=phase, source=source, target=target, klass=errs[0].klass, pairs=len(errs),
                keys=len({e.key for e in errs}),
                mape_pct=fmean(ape(e.projected, e.measured) for e in errs),
                band_low=low, band_high=high, held_out_coverage_pct=fitted.held_out_coverage_pct,
            )
        )  # fmt: skip
    return lines
