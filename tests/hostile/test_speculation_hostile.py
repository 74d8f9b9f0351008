"""Speculation, hostile round four (issue 43, item 7): the draft is planned where the engine
puts it, a draft that cannot be split is skipped with its reason, a row's acceptance figures
are checked as a whole, and a row on an engine the rules refuse is not admitted."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness import plan as planner
from harness.cli.main import app
from harness.results import admission, speculation
from harness.results import frame as frames
from harness.results.frame import load_run
from harness.spec import catalog, scenario, speculative
from harness.spec.capabilities import Layout
from tests import factories as F

BASE = """\
name: spec-layouts
models: [meta-llama/Llama-3.1-8B-Instruct]
backend: [vllm]
quantization: [none]
batch: [1]
context: [128]
output_tokens: 16
targets: [cuda]
gpu: H100-SXM-80GB
"""
DRAFT = "speculative: [{method: draft, model: llama-3.2-1b, tokens: 5}]\n"


def points(text: str) -> list[scenario.Point]:
    return scenario.expand(scenario.parse(BASE + text)).points


def test_the_draft_is_sharded_at_the_target_s_tensor_parallel_size() -> None:
    (point,) = points(DRAFT + "parallel: {cards: 8, tensor: [2]}\n")
    target = catalog.model("meta-llama/Llama-3.1-8B-Instruct")
    weights, _ = planner.draft_terms(point, target, stage=0)
    # Llama-3.2-1B on one of 2 tensor ranks: embeddings 128,256 × 2,048 / 2 = 131,334,144;
    # per layer q,o 8,388,608 / 2 + k,v 2,097,152 × 4/8 kv heads + MLP 50,331,648 / 2
    # = 30,408,704 × 16 layers = 486,539,264; norms 16 × 4,096 + 2,048 = 67,584 (replicated);
    # tied embeddings: no lm_head. 617,940,992 params × 2 B = 1,235,881,984 B (the whole draft
    # is 2,471,628,800 B: before this fix each rank was planned with all of it)
    assert weights == 1_235_881_984


def test_the_draft_sits_on_the_last_pipeline_stage_only() -> None:
    (point,) = points(DRAFT + "parallel: {cards: 8, tensor: [2], pipeline: [2]}\n")
    target = catalog.model("meta-llama/Llama-3.1-8B-Instruct")
    assert planner.draft_terms(point, target, stage=0) == (0.0, 0.0)
    # the last stage's rank holds the draft at tp=2 (the figure above)
    assert planner.draft_terms(point, target, stage=1)[0] == 1_235_881_984


def test_a_draft_whose_heads_do_not_divide_tp_is_skipped_with_the_reason() -> None:
    text = BASE.replace("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-72B-Instruct")
    text += "speculative: [{method: draft, model: qwen2.5-0.5b, tokens: 3}]\n"
    text += "parallel: {cards: 8, tensor: [4]}\n"
    grid = scenario.expand(scenario.parse(text))
    (skip,) = grid.skipped
    # the target's 64 heads split over 4 ranks; the draft's 14 do not
    assert "[rule draft-tp-divides-heads]" in skip.reason
    assert "tp=4 does not divide 14 heads" in skip.reason


def test_the_same_draft_on_one_card_is_not_refused_for_its_heads() -> None:
    assert speculative.draft_layout(None) is None
    assert speculative.draft_layout(Layout(tensor=1, pipeline=4)) is None
    assert speculative.draft_layout(Layout(tensor=4, pipeline=2)) == Layout(tensor=4)


def test_a_draft_tokenizer_is_hashed_without_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = b'{"model": "x"}' * 1000
    (tmp_path / "tokenizer.json").write_bytes(body)
    arch = catalog.model("tiny-llama").model_copy(update={"path": str(tmp_path)})

    def whole(self: Path) -> bytes:
        raise AssertionError("read whole")

    monkeypatch.setattr(Path, "read_bytes", whole)
    monkeypatch.setattr(speculative, "HASH_CHUNK", 1000)  # 14 chunks: the loop is exercised
    assert speculative.tokenizer_hash(arch) == hashlib.sha256(body).hexdigest()


# --- a row's acceptance, checked as a whole (harness.results.admission) -----------------------

NGRAM = "ngram:k=4,lookup=2-4"
# an honest n-gram row: 50 drafts of k = 4 → 200 draft tokens, 60 accepted: rate 100 × 60 /
# 200 = 30 %, length 1 + 60 / 50 = 2.2
HONEST = {
    "backend": "vllm", "speculative": NGRAM, "spec_workload": "corpus windows",
    "spec_drafts": 50, "spec_draft_tokens": 200, "spec_accepted_tokens": 60,
    "spec_acceptance_rate_pct": 30.0, "spec_acceptance_length_tokens": 2.2,
    # 20, 20, 12, 8 tokens accepted at positions 1-4 of 50 drafts: 40, 40, 24, 16 %
    "spec_acceptance_per_pos_pct": "40.0,40.0,24.0,16.0",
}  # fmt: skip


def problem(**overrides: object) -> str | None:
    return admission.row_inconsistency(F.row(**{**HONEST, **overrides}))


def test_an_honest_speculative_row_is_admitted() -> None:
    assert problem() is None


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"spec_acceptance_rate_pct": 130.0}, "outside [0, 100] %"),
        ({"spec_acceptance_rate_pct": -5.0}, "outside [0, 100] %"),
        ({"spec_acceptance_length_tokens": 0.5}, "outside [1, k + 1 = 5]"),
        ({"spec_acceptance_length_tokens": 7.0}, "outside [1, k + 1 = 5]"),
        # 1 + 60 / 50 = 2.2, not 3.0 (and 3.0 would need 2 accepted per draft of 4 at 30 %:
        # k × rate = 4 × 0.30 = 1.2 < 2, the pair itself disagrees)
        ({"spec_acceptance_length_tokens": 3.0}, "the two disagree"),
        # 100 × 60 / 200 = 30, not 25
        ({"spec_acceptance_rate_pct": 25.0, "spec_acceptance_length_tokens": 1.9,
          "spec_acceptance_per_pos_pct": "40.0,30.0,20.0"}, "≠ 100 × 60 accepted / 200"),
        # 250 draft tokens from 50 drafts of at most 4 is impossible
        ({"spec_draft_tokens": 250}, "does not hold"),
        ({"spec_acceptance_per_pos_pct": "10.0,40.0,24.0,46.0"}, "rises"),
        ({"spec_acceptance_per_pos_pct": "40.0,40.0,24.0,16.0,5.0"}, "5 positions; k = 4"),
        # 20 + 20 + 12 = 52 %: 0.52 accepted per draft, the length says 1.2
        ({"spec_acceptance_per_pos_pct": "20.0,20.0,12.0"}, "sums to 0.52"),
        # 40 + 40 + 24 + 12 = 116 %: 1.16 accepted per draft, 0.04 short of 1.2 (4 positions
        # rounded to 0.1 % are off by 0.002 at most)
        ({"spec_acceptance_per_pos_pct": "40.0,40.0,24.0,12.0"}, "sums to 1.16"),
        ({"spec_tasks_acceptance_rate_pct": 101.0}, "spec_tasks_acceptance_rate_pct 101"),
    ],
)  # fmt: skip
def test_acceptance_figures_that_disagree_are_not_admitted(
    overrides: dict[str, object], words: str
) -> None:
    found = problem(**overrides)
    assert found is not None and words in found


def test_acceptance_on_a_row_without_speculation_is_not_admitted() -> None:
    found = problem(speculative=None)
    assert found is not None and "without speculative decoding" in found


def test_a_speculative_row_on_an_engine_the_rules_refuse_is_not_admitted() -> None:
    found = problem(backend="transformers")
    assert (
        found is not None and "transformers/cuda" in found and "vLLM's speculative_config" in found
    )
    on_cpu = problem(speculative="eagle3:k=3,model=llama-3.2-1b", target="cpu",
                     spec_acceptance_per_pos_pct=None)  # fmt: skip
    assert on_cpu is not None and "GPUs (CUDA, ROCm) only" in on_cpu


def test_a_refused_speculative_row_never_joins_its_run(tmp_path: Path) -> None:
    bad = F.row(**{**HONEST, "key": "badspec", "spec_acceptance_rate_pct": 130.0})
    run = F.write_run(tmp_path / "run-a", [*F.small_grid(), bad])
    frame, unreadable = load_run(run)
    assert "badspec" not in set(frame["key"])
    assert any(p.endswith("badspec.json") and "outside [0, 100]" in w for p, w in unreadable)


def test_the_roofline_check_of_a_speculative_row_counts_tokens_accepted_per_step(
    tmp_path: Path,
) -> None:
    # roofline 50,000 tok/s for one token per step; 2.2 tokens per step (HONEST) → 110,000
    honest = F.row(**{**HONEST, "key": "honest", "decode_tok_s": 90_000.0, "total_tok_s": 90_000.0})
    beyond = F.row(**{**HONEST, "key": "beyond", "decode_tok_s": 120_000.0,
                      "total_tok_s": 120_000.0})  # fmt: skip
    plain = F.row(key="plain", decode_tok_s=90_000.0, total_tok_s=90_000.0)
    raw, _ = load_run(F.write_run(tmp_path / "run-a", [honest, beyond, plain]))
    frame = frames.flag_rows(frames.normalise(raw))
    flagged = dict(zip(frame["key"], frame["exceeds_roofline"], strict=True))
    assert flagged == {"honest": False, "beyond": True, "plain": True}


# --- plan: a speculative-only sweep is told nothing of it will be priced -----------------------


def test_a_speculative_only_sweep_is_told_at_plan_that_nothing_will_be_priced(
    tmp_path: Path,
) -> None:
    path = tmp_path / "spec-only.yaml"
    path.write_text(BASE + DRAFT)
    result = CliRunner().invoke(app, ["plan", str(path)], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert "1 speculative point(s) have no plain twin" in result.output
    assert "nothing of them is priced" in result.output


def test_a_sweep_with_the_plain_twin_has_no_such_note() -> None:
    grid = scenario.expand(scenario.parse(BASE + DRAFT.replace("[{", "[none, {")))
    assert len(grid.points) == 2
    assert speculation.unpaired_line(grid.points) is None
    (spec,) = [p for p in grid.points if p.speculative is not None]
    assert speculation.unpaired_line([spec]) is not None
