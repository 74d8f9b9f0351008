"""harness.projection.book: the band a ledger lends a projection, or why it lends none; and the
held-out check on the shipped Argonne data (leave a card out), the issue's done-when."""

from __future__ import annotations

import pytest

from harness.projection import book, ledger
from tests.projection.test_ledger import A100, H100, MI250, MI300X, pair

SCOPE = book.Scope(
    regime=book.STATIC, engines=("vllm",), weights=(book.SIXTEEN_BIT,),
    kv_caches=(book.SIXTEEN_BIT,), archs=("dense",), load=(1, 16), input_tokens=(128, 2048),
    output_tokens=(128, 2048),
)  # fmt: skip


def asymmetric() -> book.Book:
    """Two NVIDIA and two AMD cards, ten keys: nvidia → amd ratios 0.51 … 0.60, amd → nvidia
    1.55 … 2.00 (test_ledger's directions test)."""
    errors = []
    for k in range(1, 11):
        for n, a in ((H100, MI300X), (H100, MI250), (A100, MI300X), (A100, MI250)):
            errors += [pair(n, a, k, 0.50 + k / 100), pair(a, n, k, 1.50 + k / 20)]
    return book.Book(name="hand", scopes={"decode": SCOPE}, cells=ledger.cells(errors))


def query(source: str, target: str, **update: object) -> book.Query:
    q = book.Query(
        phase="decode", source=source, target=target, engine="vllm", weights="none",
        load=8, input_tokens=512, output_tokens=256,
    )  # fmt: skip
    return q.model_copy(update=update)


def test_a_direction_asymmetric_pair_gets_its_own_band_each_way() -> None:
    hand = asymmetric()
    there = hand.band(query(H100, MI300X))
    back = hand.band(query(MI300X, H100))
    assert isinstance(there, book.Band) and isinstance(back, book.Band)
    # by hand in test_ledger: nvidia → amd [0.51, 0.60] median 0.555; amd → nvidia [1.55, 2.00]
    # median 1.775 (a pooled class would give [1/x, x] both ways)
    assert (there.low, there.median, there.high) == pytest.approx((0.51, 0.555, 0.60))
    assert (back.low, back.median, back.high) == pytest.approx((1.55, 1.775, 2.0))
    assert "nvidia → amd" in there.source and "100.0 % inside" in there.source


def test_a_card_absent_from_the_ledger_gets_no_band_not_a_borrowed_one() -> None:
    got = asymmetric().band(query(H100, "H200-141GB"))
    # the H200 is an NVIDIA card like the H100 and A100, but no pair of it was measured
    assert got == f"{book.NO_BAND} (no H200-141GB with vllm in hand)"


def test_a_stack_absent_from_the_ledger_is_outside_its_data() -> None:
    got = asymmetric().band(query(H100, MI300X, engine="sglang"))
    assert got == "outside hand's data: engine sglang (its data: vllm)"


def test_a_projection_outside_the_data_is_flagged_for_every_reason() -> None:
    changed = {"weights": "fp8", "kv_cache_dtype": "fp8", "arch": "MoE", "load": 256}
    got = asymmetric().band(query(H100, MI300X, regime="offline", **changed))
    assert isinstance(got, str) and got.startswith(
        "outside hand's data: scenario offline (its data: static)"
    )
    for part in ("weights fp8", "KV cache fp8", "MoE model", "load 256 (its data: 1–16)"):
        assert part in got


def test_lend_takes_the_first_book_that_lends_and_joins_the_reasons_otherwise() -> None:
    hand = asymmetric()
    empty = book.Book(name="your runs", scopes={}, cells={})
    got = book.lend([empty, hand], query(H100, MI300X))
    assert isinstance(got, book.Band) and got.low == pytest.approx(0.51)
    why = book.lend([empty, hand], query(H100, "H200-141GB"))
    assert why == (
        f"{book.NO_BAND} (your runs has no decode pairs); "
        f"{book.NO_BAND} (no H200-141GB with vllm in hand)"
    )


def test_on_the_shipped_argonne_data_held_out_bands_cover_their_stated_level() -> None:
    """The done-when: split by card (each card left out, the band fitted on the others, scored
    on it); over the pairs that get a validated band, coverage within 5 points of 80 %; at
    least half of the same-vendor pairs get one."""
    (argonne,) = book.shipped_books()
    errors = ledger.leave_one_card_out(book.shipped_data()[0].measured)
    scored = [s for s in ledger.held_out(errors) if argonne.cells[s.error.cell].validated]
    banded = [s for s in scored if s.inside is not None]
    coverage = 100 * sum(bool(s.inside) for s in banded) / len(banded)
    assert abs(coverage - 80) <= 5
    same = [e for e in errors if e.klass == "same vendor"]
    assert sum(argonne.cells[e.cell].validated for e in same) >= len(same) / 2
    # the MI300X's 2024 ROCm stack: projections onto AMD cards are not validated
    assert not argonne.cells[("decode", "dense", "nvidia → amd")].validated


def test_the_shipped_scope_states_the_range_of_its_data() -> None:
    (argonne,) = book.shipped_books()
    decode = argonne.scopes["decode"]
    # static batches of 1 and 16 (e2e rows kept at load ≤ 16), lengths 128 … 2,048, fp16
    assert (decode.load, decode.input_tokens, decode.output_tokens) == (
        (1, 16), (128, 2048), (128, 2048),
    )  # fmt: skip
    assert decode.engines == ("tensorrt-llm", "vllm") and decode.weights == (book.SIXTEEN_BIT,)
    assert decode.archs == ("MoE", "dense") and decode.regime == book.STATIC
    assert argonne.scope_text().startswith(
        "decode: scenario static, engines tensorrt-llm, vllm, weights 16-bit, KV 16-bit, MoE and "
        "dense, load 1–16, input 128–2048 and output 128–2048 tokens; prefill: "
    )


def test_a_pair_measured_elsewhere_is_asked_as_the_query_its_key_describes() -> None:
    hand = asymmetric()
    inside = pair(H100, MI300X, 1, 0.55)  # vllm, fp16, load 1, 128 in, 128 out: in scope
    got = book.pair_band(hand, inside)
    assert isinstance(got, book.Band) and got.low == pytest.approx(0.51)
    assert book.pair_band(hand, inside, scenario="offline") == (
        "outside hand's data: scenario offline (its data: static)"
    )
