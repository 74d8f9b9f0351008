"""Quality statistics (numpy only): perplexity with bootstrap CIs, paired ΔNLL, KL, agreement.

A "window" is one scored span of the corpus; per window the caller gives the summed negative
log-likelihood (nats) and the number of scored tokens. Bootstraps resample windows with
replacement; intervals are percentile intervals (linear interpolation) at level 1 − alpha.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

_REST_FLOOR = 1e-12
_BOOTSTRAP_CELLS = 4_000_000  # index-matrix cells per chunk (~32 MB of int64)


# ---------------------------------------------------------------- perplexity


def perplexity(nll_sums: ArrayLike, token_counts: ArrayLike) -> float:
    """exp(Σ nll / Σ count): token-weighted perplexity over all windows."""
    nll, counts = _windows(nll_sums, token_counts)
    return float(np.exp(nll.sum() / counts.sum()))


def bootstrap_ppl_ci(
    nll_sums: ArrayLike,
    token_counts: ArrayLike,
    *,
    samples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> tuple[float, float]:
    """(low, high) percentile interval of the perplexity, windows resampled with replacement."""
    nll, counts = _windows(nll_sums, token_counts)
    ratios = _bootstrap_ratios([nll], counts, samples=samples, seed=seed)[0]
    low, high = _interval(np.exp(ratios), alpha)
    return low, high


def paired_dnll(
    nll_a: ArrayLike,
    nll_b: ArrayLike,
    counts: ArrayLike,
    *,
    samples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> tuple[float, float, float]:
    """(mean, low, high) of the per-token NLL difference b − a (candidate − reference), nats/token.

    mean = Σ(nll_b − nll_a) / Σ count over windows (token-weighted). The interval resamples
    windows with replacement, the same windows for a and b (paired), so the variation shared
    by both (hard vs easy text) cancels. exp(mean) − 1 ≈ the relative perplexity change.
    """
    a, weights = _windows(nll_a, counts)
    b, _ = _windows(nll_b, counts)
    if a.shape != b.shape:
        raise ValueError(
            f"nll_a has {a.size} windows but nll_b has {b.size}: pair them window by window"
        )
    diff = b - a
    mean = float(diff.sum() / weights.sum())
    ratios = _bootstrap_ratios([diff], weights, samples=samples, seed=seed)[0]
    low, high = _interval(ratios, alpha)
    return mean, low, high


def _windows(nll_sums: ArrayLike, token_counts: ArrayLike) -> tuple[FloatArray, FloatArray]:
    nll = np.asarray(nll_sums, dtype=np.float64)
    counts = np.asarray(token_counts, dtype=np.float64)
    if nll.ndim != 1 or nll.shape != counts.shape or nll.size == 0:
        raise ValueError(
            f"need one nll sum and one token count per window (non-empty, same length); "
            f"got shapes {nll.shape} and {counts.shape}"
        )
    if np.any(counts < 0) or counts.sum() <= 0:
        raise ValueError("token counts must be >= 0 with a positive total")
    if not np.all(np.isfinite(nll)):
        raise ValueError("nll sums must be finite")
    return nll, counts


def _bootstrap_ratios(
    numerators: Sequence[FloatArray], denominator: FloatArray, *, samples: int, seed: int
) -> list[FloatArray]:
    """For each resample (index matrix rows, drawn once and shared by every numerator):
    Σ numerator[idx] / Σ denominator[idx]. Chunked so the index matrix stays small."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    n = denominator.size
    rng = np.random.default_rng(seed)
    rows_per_chunk = max(1, _BOOTSTRAP_CELLS // n)
    out: list[FloatArray] = [np.empty(samples, dtype=np.float64) for _ in numerators]
    for begin in range(0, samples, rows_per_chunk):
        end = min(samples, begin + rows_per_chunk)
        index = rng.integers(0, n, size=(end - begin, n))
        denom = denominator[index].sum(axis=1)
        for target, numerator in zip(out, numerators, strict=True):
            target[begin:end] = numerator[index].sum(axis=1) / denom
    return out


def _interval(values: FloatArray, alpha: float) -> tuple[float, float]:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    low, high = np.quantile(values, [alpha / 2, 1 - alpha / 2], method="linear")
    return float(low), float(high)


# ---------------------------------------------------------------- distribution distances


def sparse_kl(ref_topk_logprobs: ArrayLike, cand_logprobs_at_ref_ids: ArrayLike) -> FloatArray:
    """KL(ref ‖ cand) per position from the reference's top-k tokens, nats. Shapes (..., k).

    Both arguments are normalized log-probabilities over the full vocabulary (log_softmax of the
    full logits), gathered at the reference's top-k token ids. The k tokens plus one 'rest'
    bucket (mass 1 − Σ top-k for each distribution, clipped at ≥ 1e-12) form a coarser
    partition of the vocabulary, so by the data-processing inequality this is a lower bound of
    the full KL, exact when k = vocab.
    """
    ref, cand = _logprob_pair(ref_topk_logprobs, cand_logprobs_at_ref_ids, "k")
    p = np.exp(ref)
    q = np.exp(cand)
    rest_p = np.clip(1.0 - p.sum(axis=-1), _REST_FLOOR, None)
    rest_q = np.clip(1.0 - q.sum(axis=-1), _REST_FLOOR, None)
    top = (p * (ref - cand)).sum(axis=-1)
    rest: FloatArray = rest_p * (np.log(rest_p) - np.log(rest_q))
    return np.asarray(top + rest, dtype=np.float64)


def full_kl(ref_logprobs: ArrayLike, cand_logprobs: ArrayLike) -> FloatArray:
    """KL(ref ‖ cand) per position over the whole last axis (dense log-probabilities), nats."""
    ref, cand = _logprob_pair(ref_logprobs, cand_logprobs, "vocab")
    p = np.exp(ref)
    with np.errstate(invalid="ignore"):
        terms = np.where(p > 0, p * (ref - cand), 0.0)
    return np.asarray(terms.sum(axis=-1), dtype=np.float64)


def _logprob_pair(ref: ArrayLike, cand: ArrayLike, last_axis: str) -> tuple[FloatArray, FloatArray]:
    """Two log-probability arrays as float64, refused unless of one (..., last_axis) shape."""
    ref_array = np.asarray(ref, dtype=np.float64)
    cand_array = np.asarray(cand, dtype=np.float64)
    if ref_array.shape != cand_array.shape or ref_array.ndim == 0:
        raise ValueError(
            f"ref and cand must have the same (..., {last_axis}) shape, "
            f"got {ref_array.shape} and {cand_array.shape}"
        )
    return ref_array, cand_array


def top1_agreement(ref_argmax: ArrayLike, cand_argmax: ArrayLike) -> float:
    """Fraction of positions where the candidate's most likely token is the reference's."""
    ref = np.asarray(ref_argmax)
    cand = np.asarray(cand_argmax)
    if ref.shape != cand.shape or ref.size == 0:
        raise ValueError(f"need the same non-empty shape, got {ref.shape} and {cand.shape}")
    return float(np.mean(ref == cand))
