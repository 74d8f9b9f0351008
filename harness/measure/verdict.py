"""The equal-quality verdict (pure; numpy only): pass, fail or undecided per quality class.

One home for the rule, the margins, the intervals and the sample-size estimate; the gate in
``results/``, the report's method section and the calibration check all read them from here.

**The rule (a one-sided non-inferiority test per metric).** Every metric is a *degradation*
d, lower is better, 0 for a candidate identical to the reference:

- perplexity: the paired per-window ΔNLL, candidate − reference, nats/token;
- task accuracy (ARC-Easy's and every other task's): reference accuracy − candidate accuracy on
  the same items.

With a margin m for the class, and [low, high] the **two-sided 90 % interval** of d, whose
ends are the two **one-sided 95 % bounds** (5 % above ``high``, 5 % below ``low``)::

    pass       ⇔  high ≤ m     (the degradation is shown to be within the margin)
    fail       ⇔  low  > m     (the degradation is shown to exceed the margin)
    undecided  ⇔  otherwise    (the interval straddles m: the sample is too small to tell)

Why 90 % two-sided: each verdict is one one-sided test at level 5 % — "pass" rejects
H0: d > m, "fail" rejects H0: d ≤ m — as in the two one-sided tests (TOST) of equivalence and
non-inferiority trials, where a 1 − 2α two-sided interval carries both one-sided α tests. A
95 % two-sided interval would test each side at 2.5 % and leave more configurations undecided
than the stated error rate requires. The two verdicts cannot both hold (low ≤ high); a
configuration whose true degradation is worse than the margin passes at most 5 % of the time,
and one within the margin fails at most 5 % of the time (to the accuracy of the interval).

**Margins.** For a quality class C (``QUALITY_CLASSES``: "99" → 0.99, "99.9" → 0.999):

- perplexity: ppl_cand ≤ ppl_ref / C  ⇔  ΔNLL ≤ −ln C, so m = −ln C nats/token
  (class 99: 0.01005; class 99.9: 0.0010005);
- accuracy: acc_cand ≥ C × acc_ref  ⇔  acc_ref − acc_cand ≤ (1 − C) × acc_ref, so
  m = (1 − C) × the reference's accuracy (class 99 at acc_ref 0.28: 0.0028).

**A configuration's verdict** for a class: fail if any gated metric fails; pass if every gated
metric passes; undecided otherwise (and with no gated metric: nothing shows it equal).

**Intervals.**

- ΔNLL: the paired percentile bootstrap of ``quality.paired_dnll`` (windows resampled with
  replacement, the same windows for both; token-weighted mean) at alpha = 0.10, i.e. its 5th and
  95th percentiles.
- Paired accuracy difference: Newcombe's hybrid score interval for paired proportions,
  method 10 of Newcombe (1998), Stat Med 17:2635–2650, at z = z_0.95 (``paired_proportion_ci``
  states the formula).

**The sample size that would decide** a metric (a power estimate): with d the observed mean,
s the observed per-unit standard deviation of the paired difference (per window, per item) and
z = z_0.95 = 1.6449, the one-sided bound d ± z·s/√n clears m once

    n = ceil((z · s / |m − d|)²)      (at least 1)

units: for d < m the n at which ``high`` ≤ m (pass), for d > m the n at which ``low`` > m
(fail). For d = m no finite n decides (None). It assumes d and s stay as observed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from harness.measure import quality

Verdict = Literal["pass", "fail", "undecided"]
VERDICTS: tuple[Verdict, ...] = ("pass", "fail", "undecided")

QUALITY_CLASSES: dict[str, float] = {"99": 0.99, "99.9": 0.999}
"""Quality class name → the share C of the reference's quality a candidate must keep."""

ALPHA = 0.05
"""The level of each one-sided test; the interval is two-sided at 1 − 2·ALPHA = 90 %."""

Z = NormalDist().inv_cdf(1 - ALPHA)
"""z_0.95 = 1.6448536…: the standard normal quantile of one one-sided 95 % bound."""

METHOD: dict[str, str] = {
    "rule": "Equal quality is a paired non-inferiority test per metric, per class C: a "
    "configuration passes a metric when the one-sided 95 % upper bound of its degradation "
    "(the two-sided 90 % interval's upper end) is at most the class margin, fails it when the "
    "lower bound is above the margin, and is undecided otherwise. A configuration passes a "
    "class when every gated metric it measured passes, fails when any fails, and is undecided "
    "otherwise; only pass is priced as equal quality.",
    "margins": "Perplexity: ΔNLL ≤ −ln C nats/token (class 99: 0.01005, class 99.9: 0.0010005), "
    "ΔNLL the candidate's mean per-token NLL minus the reference's on the same windows. "
    "Accuracy: reference − candidate accuracy on the same items ≤ (1 − C) × the reference's "
    "accuracy.",
    "intervals": "ΔNLL: the paired percentile bootstrap over windows (the same windows resampled "
    "for both), its 5th and 95th percentiles. Accuracy: Newcombe's hybrid score interval for "
    "paired proportions (method 10, Stat Med 1998;17:2635) at z = 1.645.",
    "tasks": "Tasks (harness.tasks): the paired unit is the item (classify, choice: right or "
    "wrong) or the gold field (extract: exact value or not), its degradation reference − "
    "candidate rate with the accuracy margin (1 − C) × the reference's rate. A task passes "
    "or fails on its overall interval, and fails whatever its overall says when one category's "
    "whole interval lies beyond that category's margin (the report names the category); a "
    "configuration's tasks verdict is fail if any task fails, pass if every one passes.",
    "sample size": "The units (windows, items) that would decide an undecided metric at the "
    "observed mean d, assuming its interval narrows as 1/√n: n' = ⌈n × (h ÷ |m − d|)²⌉, h the "
    "interval's half-width on the margin's side (for a normal interval h = 1.645 × s ÷ √n, so "
    "n' = ⌈(1.645 × s ÷ |m − d|)²⌉ with s the per-unit standard deviation); none when d = m.",
}
"""The method as the report states it: each sentence once, read by the page."""

BOOTSTRAP_SAMPLES = 1000
"""Resamples of the ΔNLL bootstrap (``quality.paired_dnll``'s default)."""

Metric = Literal["ppl", "tasks"]


# ---------------------------------------------------------------- the rule and the margins


def decide(low: float, high: float, margin: float) -> Verdict:
    """pass if high ≤ margin; fail if low > margin; undecided otherwise (also when any of the
    three is NaN: an interval that cannot be computed decides nothing)."""
    if low > high:
        raise ValueError(f"the interval's low bound {low} is above its high bound {high}")
    code = decide_codes(np.array([low]), np.array([high]), np.array([margin]))[0]
    return VERDICTS[int(code)]


def decide_codes(low: ArrayLike, high: ArrayLike, margin: ArrayLike) -> NDArray[np.int64]:
    """``decide`` over arrays (the gate's million rows): the index in VERDICTS of each row's
    verdict (0 pass, 1 fail, 2 undecided; NaN anywhere → undecided)."""
    lo, hi, m = (np.asarray(x, dtype=np.float64) for x in (low, high, margin))
    known = ~(np.isnan(lo) | np.isnan(hi) | np.isnan(m))
    with np.errstate(invalid="ignore"):
        passes, fails = known & (hi <= m), known & (lo > m)
    return np.select([passes, fails], [0, 1], default=2).astype(np.int64)


def needed_units(
    estimate: ArrayLike, low: ArrayLike, high: ArrayLike, margin: ArrayLike, units: ArrayLike
) -> NDArray[np.float64]:
    """The units (windows, items) at which the interval would clear the margin, from the
    interval itself: its half-width on the margin's side, h = high − d for d < m (toward pass),
    d − low for d > m (toward fail), shrinks as 1/√n, so it clears the gap |m − d| at

        n' = ceil(n · (h / |m − d|)²)      (at least 1)

    — for a normal interval h = z·s/√n, and n' = ceil((z·s/|m − d|)²), the per-unit form
    (``needed_n``). Read from the interval, it also holds where s says nothing: a paired
    proportion with no discordant item has s = 0 yet Newcombe's interval keeps a width. NaN
    where no finite n decides (d = m, or a NaN)."""
    d, lo, hi, m, n = (
        np.asarray(x, dtype=np.float64) for x in (estimate, low, high, margin, units)
    )
    gap = np.abs(m - d)
    half = np.where(d < m, hi - d, d - lo)
    with np.errstate(invalid="ignore", divide="ignore"):
        needed = np.ceil(n * (half / gap) ** 2)
    needed = np.where(gap > 0, np.maximum(needed, 1.0), np.nan)
    return np.asarray(needed, dtype=np.float64)


def combine(verdicts: Iterable[Verdict]) -> Verdict:
    """A configuration's verdict from its gated metrics': fail if any fails, pass if every one
    passes (at least one), undecided otherwise."""
    seen = list(verdicts)
    if "fail" in seen:
        return "fail"
    if seen and all(v == "pass" for v in seen):
        return "pass"
    return "undecided"


def class_share(name: str) -> float:
    """C of a quality class by name ("99" → 0.99), or a ValueError naming the classes."""
    if name not in QUALITY_CLASSES:
        raise ValueError(
            f"{name!r} is not a quality class; expected one of: {', '.join(QUALITY_CLASSES)}"
        )
    return QUALITY_CLASSES[name]


def ppl_margin(share: float) -> float:
    """m = −ln C nats/token: ΔNLL ≤ m ⇔ ppl_cand ≤ ppl_ref / C (0.99 → 0.01005)."""
    _check_share(share)
    return -math.log(share)


def accuracy_margin(share: float, reference_accuracy: float) -> float:
    """m = (1 − C) × acc_ref: acc_ref − acc_cand ≤ m ⇔ acc_cand ≥ C × acc_ref."""
    _check_share(share)
    return accuracy_share(share) * reference_accuracy


def accuracy_share(share: float) -> float:
    """1 − C: the share of the reference's accuracy a class lets a candidate lose (an array of
    reference accuracies times this is their margins)."""
    _check_share(share)
    return 1.0 - share


def _check_share(share: float) -> None:
    if not 0 < share < 1:
        raise ValueError(f"a quality class keeps a share in (0, 1) of the reference, got {share}")


# ---------------------------------------------------------------- intervals


@dataclass(frozen=True)
class Interval:
    """A degradation estimate and its one-sided 95 % bounds (two-sided 90 % interval).

    ``sd`` is the per-unit standard deviation of the paired difference and ``n`` the units
    (windows, items) it came from: what ``needed_n`` reads."""

    estimate: float
    low: float
    high: float
    sd: float
    n: int


def dnll_interval(
    ref_nll: ArrayLike,
    cand_nll: ArrayLike,
    ref_tokens: ArrayLike,
    cand_tokens: ArrayLike,
    *,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = 0,
) -> Interval:
    """Paired per-window ΔNLL (candidate − reference), nats/token, with its one-sided 95 %
    bounds: ``quality.paired_dnll`` at alpha = 2·ALPHA (its 5th and 95th percentiles).

    Both scored the same windows, so their token counts must agree window by window.
    ``sd`` is that of the ratio estimator's per-window values
    u_i = (Δnll_i − d·tokens_i) / mean(tokens) (= the per-token Δ of each window, minus d, when
    every window has the same tokens), so that sd/√n is the standard error of d.
    """
    tokens = np.asarray(ref_tokens, dtype=np.float64)
    other = np.asarray(cand_tokens, dtype=np.float64)
    if tokens.shape != other.shape or not np.array_equal(tokens, other):
        raise ValueError(
            "the reference and the candidate scored different windows (their token counts "
            "differ): pair them window by window, the same windows for both"
        )
    mean, low, high = quality.paired_dnll(
        ref_nll, cand_nll, tokens, samples=samples, seed=seed, alpha=2 * ALPHA
    )
    diff = np.asarray(cand_nll, dtype=np.float64) - np.asarray(ref_nll, dtype=np.float64)
    units = (diff - mean * tokens) / tokens.mean()
    return Interval(mean, low, high, _sd(units), int(tokens.size))


def wilson_interval(successes: int, n: int, z: float = Z) -> tuple[float, float]:
    """Wilson's score interval of a proportion p = successes / n at normal quantile z:

    (2np + z² ∓ z·√(z² + 4np(1 − p))) / (2(n + z²))
    """
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes} of {n}")
    p = successes / n
    centre = 2 * n * p + z * z
    half = z * math.sqrt(z * z + 4 * n * p * (1 - p))
    denominator = 2 * (n + z * z)
    return (centre - half) / denominator, (centre + half) / denominator


def paired_proportion_ci(a: int, b: int, c: int, d: int, z: float = Z) -> Interval:
    """Newcombe's hybrid score interval for the difference of two paired proportions
    (Newcombe 1998, "Improved confidence intervals for the difference between binomial
    proportions based on paired data", Stat Med 17:2635–2650, method 10; as given in
    Fagerland, Lydersen & Laake 2017, "Statistical Analysis of Contingency Tables", ch. 8,
    "Newcombe square-and-add", and in Newcombe & Altman 2000, "Statistics with Confidence").

    The 2×2 table of the same n items (reference by row, candidate by column)::

                       cand right  cand wrong
        ref right          a           b
        ref wrong          c           d

    p1 = (a + b)/n (reference accuracy), p2 = (a + c)/n (candidate accuracy), and the
    degradation θ = p1 − p2 = (b − c)/n. With (l1, u1), (l2, u2) the Wilson intervals of p1, p2
    at z, and φ the correlation of the two marginals with method 10's continuity correction::

        A = ad − bc;  φ = (A − n/2)/√((a+b)(c+d)(a+c)(b+d))  if A > n/2
                      φ = 0                                   if 0 ≤ A ≤ n/2
                      φ = A/√((a+b)(c+d)(a+c)(b+d))           if A < 0
                      φ = 0                                   if any marginal total is 0
        L = θ − √((p1 − l1)² − 2φ(p1 − l1)(u2 − p2) + (u2 − p2)²)
        U = θ + √((p2 − l2)² − 2φ(p2 − l2)(u1 − p1) + (u1 − p1)²)

    clipped to [−1, 1]. At the default z = z_0.95 it is the two-sided 90 % interval, whose ends
    are one-sided 95 % bounds. n = 0 gives θ = NaN and [−1, 1]: no items show nothing.
    ``sd`` is that of the per-item difference (1, 0 or −1), ddof = 1 (NaN below 2 items).
    """
    cells = (a, b, c, d)
    if any(x < 0 for x in cells):
        raise ValueError(f"the 2x2 table's counts must be >= 0, got a, b, c, d = {cells}")
    n = a + b + c + d
    if n == 0:
        return Interval(math.nan, -1.0, 1.0, math.nan, 0)
    p1, p2 = (a + b) / n, (a + c) / n
    theta = (b - c) / n
    l1, u1 = wilson_interval(a + b, n, z)
    l2, u2 = wilson_interval(a + c, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    if margins == 0 or 0 <= cross <= n / 2:
        phi = 0.0
    elif cross > n / 2:
        phi = (cross - n / 2) / math.sqrt(margins)
    else:
        phi = cross / math.sqrt(margins)
    below = math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0))
    above = math.sqrt(max((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2, 0))
    variance = ((b + c) / n - theta * theta) * n / (n - 1) if n > 1 else math.nan
    sd = math.sqrt(max(variance, 0.0)) if n > 1 else math.nan
    return Interval(theta, max(-1.0, theta - below), min(1.0, theta + above), sd, n)


def paired_table(ref_hits: ArrayLike, cand_hits: ArrayLike) -> tuple[int, int, int, int]:
    """(a, b, c, d) of ``paired_proportion_ci`` from per-item hits on the same items."""
    ref = np.asarray(ref_hits, dtype=bool)
    cand = np.asarray(cand_hits, dtype=bool)
    if ref.ndim != 1 or ref.shape != cand.shape:
        raise ValueError(
            f"need one hit per item for both, on the same items; got shapes {ref.shape} "
            f"and {cand.shape}"
        )
    a = int(np.sum(ref & cand))
    b = int(np.sum(ref & ~cand))
    c = int(np.sum(~ref & cand))
    return a, b, c, int(ref.size) - a - b - c


def accuracy_interval(ref_hits: ArrayLike, cand_hits: ArrayLike) -> Interval:
    """Reference − candidate accuracy on the same items, Newcombe's method 10 at z_0.95."""
    return paired_proportion_ci(*paired_table(ref_hits, cand_hits))


def _sd(values: NDArray[np.float64]) -> float:
    return float(np.std(values, ddof=1)) if values.size > 1 else math.nan


# ---------------------------------------------------------------- sample size


def needed_n(estimate: float, sd: float, margin: float, *, z: float = Z) -> int | None:
    """Units (windows, items) at which the one-sided 95 % bound would clear the margin, at the
    observed mean and spread: ceil((z·s / |m − d|)²), at least 1; None when d = m or when
    d or s is not known (NaN)."""
    if sd < 0:
        raise ValueError(f"a standard deviation is >= 0, got {sd}")
    # a normal interval over one unit: half-width z·s on both sides (needed_units' formula)
    one = np.array([1.0])
    n = needed_units(np.array([estimate]), estimate - z * sd * one, estimate + z * sd * one,
                     np.array([margin]), one)[0]  # fmt: skip
    return None if math.isnan(n) else int(n)


# ---------------------------------------------------------------- one metric, one configuration


@dataclass(frozen=True)
class Decision:
    """One metric's verdict for one class: the interval, the margin, the bound that decided it
    (``high`` for pass, ``low`` for fail; for undecided the one that would decide at the
    observed mean: ``high`` when d ≤ m, else ``low``) and the units that would decide it."""

    metric: Metric
    verdict: Verdict
    interval: Interval
    margin: float
    bound: float
    needed: int | None


def judge(metric: Metric, interval: Interval, margin: float) -> Decision:
    """The verdict of one metric's interval against its margin, with what decided it."""
    verdict = decide(interval.low, interval.high, margin)
    if verdict == "pass":
        bound = interval.high
    elif verdict == "fail":
        bound = interval.low
    else:
        bound = interval.low if interval.estimate > margin else interval.high
    needed = None
    if verdict == "undecided":
        i = interval
        n = needed_units(i.estimate, i.low, i.high, margin, i.n)
        needed = None if math.isnan(float(n)) else int(n)
    return Decision(metric, verdict, interval, margin, bound, needed)


@dataclass(frozen=True)
class TaskDecision:
    """One task's verdict for one class: the overall decision, and the category that failed it
    when its overall did not (None: no category is shown beyond its margin)."""

    verdict: Verdict
    overall: Decision
    failed_category: str | None = None
    category: Decision | None = None


def judge_task(
    share: float,
    overall: Interval,
    ref_rate: float,
    categories: Sequence[tuple[str, Interval, float]] = (),
) -> TaskDecision:
    """A task's verdict (``METHOD["tasks"]``): its overall paired degradation against
    m = (1 − C) × the reference's rate decides as any metric's; a category whose lower bound is
    above its own margin ((1 − C) × its reference rate) fails the task whatever the overall
    says: the category with the largest excess (low − m) is named. Categories only fail a task:
    at 30 items a category's interval is rarely narrow enough to pass, and an undecided
    category does not hold back an overall pass."""
    decision = judge("tasks", overall, accuracy_margin(share, ref_rate))
    worst: tuple[float, str, Decision] | None = None
    for name, interval, rate in categories:
        got = judge("tasks", interval, accuracy_margin(share, rate))
        if got.verdict == "fail":
            excess = interval.low - got.margin
            if worst is None or excess > worst[0]:
                worst = (excess, name, got)
    if worst is None:
        return TaskDecision(decision.verdict, decision)
    return TaskDecision("fail", decision, worst[1], worst[2])


@dataclass(frozen=True)
class PairedWindows:
    """Per-window NLL sums (nats) and token counts of the reference and the candidate."""

    ref_nll: ArrayLike
    cand_nll: ArrayLike
    ref_tokens: ArrayLike
    cand_tokens: ArrayLike


@dataclass(frozen=True)
class PairedItems:
    """Per-item hits (True = right) of the reference and the candidate on the same items."""

    ref_hits: ArrayLike
    cand_hits: ArrayLike


def gate(
    share: float,
    *,
    windows: PairedWindows | None = None,
    items: PairedItems | None = None,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = 0,
) -> tuple[Verdict, list[Decision]]:
    """A configuration's verdict for the class keeping ``share`` (C) of the reference, over
    the gated metrics given: perplexity from ``windows``, accuracy from ``items``."""
    decisions: list[Decision] = []
    if windows is not None:
        interval = dnll_interval(
            windows.ref_nll, windows.cand_nll, windows.ref_tokens, windows.cand_tokens,
            samples=samples, seed=seed,
        )  # fmt: skip
        decisions.append(judge("ppl", interval, ppl_margin(share)))
    if items is not None:
        ref = np.asarray(items.ref_hits, dtype=bool)
        reference_accuracy = float(ref.mean()) if ref.size else math.nan
        margin = accuracy_margin(share, reference_accuracy)
        decisions.append(judge("tasks", accuracy_interval(ref, items.cand_hits), margin))
    return combine(d.verdict for d in decisions), decisions


# ---------------------------------------------------------------- calibration


def simulate_verdicts(
    share: float,
    *,
    windows: PairedWindows | None = None,
    items: PairedItems | None = None,
    replications: int = 200,
    seed: int = 0,
    samples: int = 500,
) -> dict[Verdict, float]:
    """Share of replications whose verdict is pass / fail / undecided for the class.

    Each replication resamples the stored scores with replacement — windows (the same windows
    for both, paired) and items (the same items for both) — and runs ``gate`` on the resample
    (its ΔNLL bootstrap with ``samples`` resamples, seeded by the replication). Fixed ``seed``:
    the same inputs give the same shares.
    """
    if replications < 1:
        raise ValueError(f"replications must be >= 1, got {replications}")
    rng = np.random.default_rng(seed)
    win = None if windows is None else _arrays(windows)
    hit = None if items is None else _arrays(items)
    counts: dict[Verdict, int] = dict.fromkeys(VERDICTS, 0)
    for r in range(replications):
        drawn_windows = drawn_items = None
        if win is not None:
            at = rng.integers(0, win[0].size, size=win[0].size)
            drawn_windows = PairedWindows(*(x[at] for x in win))
        if hit is not None:
            at = rng.integers(0, max(hit[0].size, 1), size=hit[0].size)
            drawn_items = PairedItems(*(x[at] for x in hit))
        verdict, _ = gate(
            share, windows=drawn_windows, items=drawn_items, samples=samples, seed=seed + r
        )
        counts[verdict] += 1
    return {v: counts[v] / replications for v in VERDICTS}


def _arrays(paired: PairedWindows | PairedItems) -> Sequence[NDArray[np.float64]]:
    if isinstance(paired, PairedWindows):
        fields = (paired.ref_nll, paired.cand_nll, paired.ref_tokens, paired.cand_tokens)
        arrays = [np.asarray(x, dtype=np.float64) for x in fields]
    else:
        arrays = [np.asarray(x, dtype=np.float64) for x in (paired.ref_hits, paired.cand_hits)]
    if any(x.ndim != 1 or x.shape != arrays[0].shape for x in arrays):
        raise ValueError(
            f"need one value per window / item in each array, the same count; got shapes "
            f"{[x.shape for x in arrays]}"
        )
    return arrays
