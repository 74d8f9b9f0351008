"""Quality statistics against hand-computed and constructed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.typing import NDArray

from harness.measure.quality import (
    bootstrap_ppl_ci,
    full_kl,
    paired_dnll,
    perplexity,
    sparse_kl,
    top1_agreement,
)


def _log_softmax(logits: NDArray[np.float64]) -> NDArray[np.float64]:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    out: NDArray[np.float64] = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return out


def _random_windows(n: int, seed: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    counts = np.full(n, 256.0)
    nll = counts * rng.normal(5.5, 0.3, size=n)  # per-window mean NLL varies (easy vs hard text)
    return nll, counts


def test_perplexity_of_a_uniform_distribution_over_v_tokens_is_v() -> None:
    vocab = 4096
    counts = np.array([256.0, 100.0, 7.0])
    nll = counts * math.log(vocab)  # every token costs log V nats
    assert perplexity(nll, counts) == pytest.approx(vocab, rel=1e-12)


def test_perplexity_weights_windows_by_their_tokens() -> None:
    # windows of 1 and 3 tokens with 2 and 6 nats: exp(8 / 4), not the mean of per-window ppl
    assert perplexity([2.0, 6.0], [1, 3]) == pytest.approx(math.exp(2.0))


def test_perplexity_rejects_mismatched_windows() -> None:
    with pytest.raises(ValueError, match="one nll sum and one token count per window"):
        perplexity([1.0, 2.0], [1])


def test_bootstrap_ci_contains_the_point_estimate_and_narrows_with_more_windows() -> None:
    few_nll, few_counts = _random_windows(20, seed=1)
    many_nll, many_counts = _random_windows(2000, seed=1)
    few_low, few_high = bootstrap_ppl_ci(few_nll, few_counts, samples=500)
    many_low, many_high = bootstrap_ppl_ci(many_nll, many_counts, samples=500)
    assert few_low <= perplexity(few_nll, few_counts) <= few_high
    assert many_low <= perplexity(many_nll, many_counts) <= many_high
    assert (many_high - many_low) < (few_high - few_low) / 3  # ~√100 = 10× narrower


def test_bootstrap_ci_is_reproducible_with_a_seed() -> None:
    nll, counts = _random_windows(50, seed=2)
    assert bootstrap_ppl_ci(nll, counts, seed=7) == bootstrap_ppl_ci(nll, counts, seed=7)


def test_paired_dnll_of_a_constant_shift_excludes_zero() -> None:
    nll_a, counts = _random_windows(64, seed=3)
    nll_b = nll_a + 0.01 * counts  # the candidate costs 0.01 nats more on every token
    mean, low, high = paired_dnll(nll_a, nll_b, counts, samples=500, seed=0, alpha=0.05)
    assert mean == pytest.approx(0.01)
    assert 0 < low <= mean <= high


def test_paired_dnll_of_identical_inputs_is_exactly_zero() -> None:
    nll, counts = _random_windows(64, seed=4)
    assert paired_dnll(nll, nll.copy(), counts, samples=200, seed=0, alpha=0.05) == (0.0, 0.0, 0.0)


def test_paired_dnll_is_narrower_than_the_unpaired_spread() -> None:
    rng = np.random.default_rng(5)
    nll_a, counts = _random_windows(64, seed=5)
    nll_b = nll_a + counts * rng.normal(0.001, 0.001, size=64)
    _, low, high = paired_dnll(nll_a, nll_b, counts, samples=500, seed=0, alpha=0.05)
    ppl_low, ppl_high = bootstrap_ppl_ci(nll_a, counts, samples=500)
    assert high - low < math.log(ppl_high / ppl_low) / 10


def test_sparse_kl_equals_full_kl_when_k_is_the_vocabulary() -> None:
    rng = np.random.default_rng(6)
    ref = _log_softmax(rng.normal(size=(5, 32)))
    cand = _log_softmax(ref + rng.normal(scale=0.3, size=(5, 32)))
    order = np.argsort(-ref, axis=-1)  # all 32 ids, by reference probability
    sparse = sparse_kl(np.take_along_axis(ref, order, -1), np.take_along_axis(cand, order, -1))
    np.testing.assert_allclose(sparse, full_kl(ref, cand), rtol=1e-9, atol=1e-12)


def test_sparse_kl_is_a_lower_bound_of_full_kl_for_smaller_k() -> None:
    rng = np.random.default_rng(7)
    ref = _log_softmax(2 * rng.normal(size=(50, 64)))
    cand = _log_softmax(ref + rng.normal(scale=0.5, size=(50, 64)))
    full = full_kl(ref, cand)
    for k in (1, 4, 16):
        top = np.argsort(-ref, axis=-1)[:, :k]
        sparse = sparse_kl(np.take_along_axis(ref, top, -1), np.take_along_axis(cand, top, -1))
        assert np.all(sparse <= full + 1e-12) and np.all(sparse >= -1e-12)


def test_full_kl_of_identical_distributions_is_zero() -> None:
    ref = _log_softmax(np.random.default_rng(8).normal(size=(3, 10)))
    np.testing.assert_allclose(full_kl(ref, ref), 0.0, atol=1e-15)


def test_top1_agreement_counts_matching_argmaxes() -> None:
    assert top1_agreement([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
