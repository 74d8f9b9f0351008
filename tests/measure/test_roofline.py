"""Roofline ceilings on worked numbers."""

from __future__ import annotations

import pytest

from harness.measure.roofline import decode_ceiling_tok_s, fraction, mean_decode_context


def test_decode_ceiling_of_16_gb_of_weights_at_3_35_tb_s_is_209_tok_s() -> None:
    assert decode_ceiling_tok_s(3350, 16e9, 0, 1) == pytest.approx(209.375)


def test_decode_ceiling_grows_with_batch_and_shrinks_with_kv_reads() -> None:
    # batch 8 reads 16 GB of weights + 4 GB of KV per step and yields 8 tokens
    assert decode_ceiling_tok_s(3350, 16e9, 4e9, 8) == pytest.approx(3350e9 * 8 / 20e9)


def test_mean_decode_context_is_context_plus_half_the_new_tokens() -> None:
    assert mean_decode_context(1000, 100) == 1050.0


def test_fraction_of_the_ceiling() -> None:
    assert fraction(104.6875, 209.375) == 0.5


def test_roofline_rejects_meaningless_inputs() -> None:
    with pytest.raises(ValueError, match="bandwidth_gb_s"):
        decode_ceiling_tok_s(0, 16e9, 0, 1)
    with pytest.raises(ValueError, match="batch"):
        decode_ceiling_tok_s(3350, 16e9, 0, 0)
    with pytest.raises(ValueError, match="ceiling"):
        fraction(1.0, 0.0)
