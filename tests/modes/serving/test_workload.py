"""Workloads as data: the Mooncake trace read and scaled, prompts built from the corpus whose
shared prefixes are exactly the trace's shared blocks (token level, with the tiny model's own
tokenizer, on the text as sent), multi-turn conversations that resend earlier turns, lognormal
lengths, and the trace's arrival rate and burstiness."""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
from functools import cache
from pathlib import Path

import pytest

from harness.corpus import eval_text
from harness.errors import UserInputError
from harness.modes.serving import workload as wl
from harness.modes.serving.prompts import model_tokenizer, workload_prompts
from harness.modes.serving.spec import Lengths, MultiTurn, Serving, SloTargets, Workload

REPO = Path(__file__).resolve().parents[3]
TINY_MODEL = str(REPO / "harness" / "data" / "tiny-llama")


@cache
def tokenizer() -> tuple[wl.Encode, wl.Decode]:
    return model_tokenizer(TINY_MODEL)


@cache
def corpus_ids() -> tuple[int, ...]:
    return tuple(tokenizer()[0](eval_text()))


def book() -> wl.BlockBook:
    encode, decode = tokenizer()
    return wl.BlockBook(corpus_ids(), encode, decode)


def sent_ids(ids: list[int]) -> list[int]:
    """The tokens the server sees: the prompt text as sent, encoded again."""
    encode, decode = tokenizer()
    return encode(decode(ids))


def shared_blocks(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return wl.common_prefix(a, b)


def assert_shares_exactly_the_shared_blocks(
    requests: list[wl.Request], block: int, since: int = 0
) -> int:
    """Every pair of built prompts (the later one from `since` on), as the server tokenizes
    them, shares k × block tokens where k is the pair's shared leading hash ids (capped at the
    shorter prompt), and no more. Returns the largest k seen."""
    ids = wl.trace_prompt_ids(requests, block, book())
    sent = [sent_ids(p) for p in ids]
    assert sent == ids  # the text round trip keeps every token
    largest = 0
    pairs = [(i, j) for i in range(max(1, since), len(ids)) for j in range(i)]
    for i, j in pairs:
        ra, a, rb, b = requests[i], sent[i], requests[j], sent[j]
        k = shared_blocks(ra.hash_ids, rb.hash_ids)
        largest = max(largest, k)
        expected = min(k * block, len(a), len(b))
        assert wl.common_prefix(a, b) == expected, (ra, rb)
    return largest


def test_two_requests_sharing_k_hash_ids_share_exactly_k_blocks_of_the_real_trace() -> None:
    # 400 requests in, Mooncake's conversations come back: pairs share up to dozens of blocks
    trace = Workload(trace="mooncake-conversation", length_scale=1 / 32, max_requests=460)
    requests = wl.scaled_requests(trace)
    assert trace.block_tokens == 16
    assert assert_shares_exactly_the_shared_blocks(requests, trace.block_tokens, 400) >= 10


def test_siblings_with_the_same_parent_part_at_their_first_token(tmp_path: Path) -> None:
    # a hand-made prefix tree: 1 → (2 → (3, 4), 5), 6; ten siblings under one parent
    lines = [[1, 2, 3], [1, 2, 4], [1, 5], [6], [1, 2, 3, 7]]
    lines += [[1, 2, 100 + i] for i in range(10)]
    path = tmp_path / "trace.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": i * 100, "input_length": 512 * len(h) - 40,
                        "output_length": 8, "hash_ids": h}) + "\n"
            for i, h in enumerate(lines)
        )
    )  # fmt: skip
    trace = Workload(trace=str(path), length_scale=0.125, max_requests=len(lines))
    requests = wl.scaled_requests(trace)
    block = trace.block_tokens
    assert block == 64
    assert [r.prompt_tokens for r in requests] == [64 * len(h) - 5 for h in lines]
    assert assert_shares_exactly_the_shared_blocks(requests, block) == 3


def test_a_hash_id_under_two_parents_is_refused() -> None:
    requests = [
        wl.Request(arrival_s=0, prompt_tokens=32, output_tokens=1, hash_ids=(1, 2)),
        wl.Request(arrival_s=0, prompt_tokens=32, output_tokens=1, hash_ids=(3, 2)),
    ]
    with pytest.raises(ValueError, match="two different blocks"):
        wl.trace_prompt_ids(requests, 16, book())


def test_scaling_keeps_the_blocks_a_prompt_still_covers(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps({"timestamp": 1000, "input_length": 1100, "output_length": 40,
                    "hash_ids": [7, 8, 9]}) + "\n"
        + json.dumps({"timestamp": 3000, "input_length": 10, "output_length": 1,
                      "hash_ids": [7]}) + "\n"
    )  # fmt: skip
    requests = wl.scaled_requests(
        Workload(trace=str(path), length_scale=0.25, time_scale=0.5, max_requests=2)
    )
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens, r.hash_ids) for r in requests] == [
        (0.0, 275, 10, (7, 8, 9)),  # ⌈275 / 128⌉ = 3 blocks
        (1.0, 2, 1, (7,)),  # (3000 − 1000) ms × 0.5; 10 × 0.25 rounds to 2, output at least 1
    ]


def test_a_bad_trace_line_names_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n'
                    '{"timestamp": 0, "input_length": "many", "output_length": 1}\n')  # fmt: skip
    with pytest.raises(UserInputError) as info:
        wl.read_trace(str(path), 2)
    assert info.value.file == str(path) and info.value.line == 2
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n')
    with pytest.raises(UserInputError, match="fewer than max_requests 3"):
        wl.read_trace(str(path), 3)


def test_trace_arrivals_are_the_mean_rate_and_the_gaps_shape() -> None:
    def at(*times: float) -> list[wl.Request]:
        return [wl.Request(arrival_s=t, prompt_tokens=1, output_tokens=1, hash_ids=())
                for t in times]  # fmt: skip

    rate, shape = wl.trace_arrivals(at(0, 1, 2, 3, 4))
    assert rate == pytest.approx(1.0) and shape == wl.MAX_BURSTINESS  # even gaps: no variance
    # gaps 0, 0, 3: mean 1, variance 2 → CV² 2 → shape 0.5 (burstier than Poisson)
    rate, shape = wl.trace_arrivals(at(0, 0, 0, 3))
    assert rate == pytest.approx(1.0) and shape == pytest.approx(0.5)
    with pytest.raises(UserInputError, match="two distinct timestamps"):
        wl.trace_arrivals(at(5, 5))


def serving(**fields: object) -> Serving:
    base: dict[str, object] = {
        "prompt_tokens": Lengths(mean=24, sd=8),
        "output_tokens": Lengths(mean=6, sd=2),
        "slo": SloTargets(ttft_ms_p99=1000, tpot_ms_p99=100),
    }
    return Serving.model_validate({**base, **fields})


def test_multi_turn_turn_i_resends_every_earlier_turn_and_conversations_share_the_system() -> None:
    mt = MultiTurn(conversations=3, turns=4, shared_system_tokens=40)
    level = serving(concurrency=[2], workload=Workload(multi_turn=mt)).levels(seed=3)[0]
    assert level.requests == 12
    built = wl.multi_turn_prompt_ids(level, book())
    assert [len(p) for p, _ in built] == [p for p, _ in wl.level_lengths(level)]
    assert [o for _, o in built] == [o for _, o in wl.level_lengths(level)]
    by_turn = [built[t * 3 : (t + 1) * 3] for t in range(4)]  # sent turn by turn
    for conv in range(3):
        for turn in range(1, 4):
            earlier, own = by_turn[turn - 1][conv][0], by_turn[turn][conv][0]
            assert own[: len(earlier)] == earlier  # the earlier turn's prompt, resent
            # then that turn's answer (its output length in tokens), then new user text
            assert len(own) > len(earlier) + by_turn[turn - 1][conv][1]
    firsts = [sent_ids(p) for p, _ in by_turn[0]]
    for a, b in itertools.combinations(firsts, 2):
        assert wl.common_prefix(a, b) == 40  # the system prompt, and no more


def test_workload_prompts_send_the_built_ids_as_text_within_the_model() -> None:
    trace = Workload(trace="mooncake-conversation", length_scale=0.25, max_requests=12)
    level = serving(workload=trace, prefix_caching=[True]).levels(trace_arrivals=(2.0, 0.5))[0]
    prompts = workload_prompts(TINY_MODEL, level, max_model_len=2048)
    lengths = wl.level_lengths(level)
    room = 2048 - max(o for _, o in lengths) - 8
    # cut to the model, and at a word start (the round trip keeps every token): within a word
    for spec, (wanted, _) in zip(prompts, lengths, strict=True):
        assert min(wanted, room) - 20 < spec.prompt_tokens <= min(wanted, room)
    assert [p.output_tokens for p in prompts] == [o for _, o in lengths]
    first = [tokenizer()[0](p.prompt) for p in prompts]
    assert all(wl.common_prefix(first[0], ids) == 128 for ids in first[1:])  # hash id 0 alone


def test_lognormal_lengths_have_the_stated_mean_and_sd_and_a_long_tail() -> None:
    rng = random.Random(0)
    spec = Lengths(mean=200, sd=150, distribution="lognormal")
    draws = [spec.draw(rng) for _ in range(20_000)]
    assert statistics.fmean(draws) == pytest.approx(200, rel=0.03)
    assert statistics.pstdev(draws) == pytest.approx(150, rel=0.08)
    assert statistics.median(draws) < 200 and min(draws) >= 1  # skewed right, positive
    normal = [Lengths(mean=200, sd=150).draw(random.Random(0)) for _ in range(3)]
    again = random.Random(0)
    assert normal[0] == max(1, round(again.gauss(200, 150)))  # the normal draw is unchanged


def test_lognormal_sigma_follows_the_coefficient_of_variation() -> None:
    spec = Lengths(mean=100, sd=100, distribution="lognormal")
    logs = [math.log(spec.draw(random.Random(i))) for i in range(4000)]
    assert statistics.pstdev(logs) == pytest.approx(math.sqrt(math.log(2)), rel=0.05)
