"""The SNIPS training data: the tasks' TRAIN split only, rendered by the tasks' own templates, the
prompt fed but never predicted, every intent in every step; and the LoRA rank's sanity bound."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.modes.training import data
from harness.modes.training.device.trainer import batch_tensors, predicted_tokens
from harness.spec import models
from harness.tasks.builtin import SNIPS_INTENTS, SNIPS_TASKS, builtin_task, snips_split
from harness.tasks.spec import render_prompt, render_target

TINY = str(models.PACKAGE_DATA / "tiny-llama")


def test_the_training_examples_are_the_train_split_never_the_scored_one() -> None:
    trained = data.text("snips")
    train_texts = {t.values["text"] for t in snips_split("train")}
    for item in snips_split("scored"):  # a scored utterance is trained on only as a train item
        text = item.values["text"]
        assert f"Utterance: {text}\n" not in trained or text in train_texts
    assert len(data.examples("train")) == len(snips_split("train")) * len(SNIPS_TASKS)
    train_ids = {i.id for i in snips_split("train")}
    assert not train_ids & {i.id for i in snips_split("scored")}


def test_each_example_is_the_tasks_own_prompt_and_answer_and_a_newline() -> None:
    prompt, answer = data.examples("train")[0]
    item = snips_split("train")[0]
    task = builtin_task(SNIPS_TASKS[0])
    assert prompt == render_prompt(task, item)
    assert answer == render_target(task, item) + "\n"


def test_snips_intent_is_the_intent_task_alone_with_the_same_splits() -> None:
    pairs = data.examples("train", "snips-intent")
    intent = builtin_task("snips-intent")
    items = data.interleaved(snips_split("train"))
    assert pairs == [(render_prompt(intent, i), render_target(intent, i) + "\n") for i in items]
    assert all(p.endswith("\nIntent:") for p, _ in data.examples("fewshot", "snips-intent"))
    assert data.data_hash("snips-intent") != data.data_hash("snips")
    assert data.split_text("snips-intent", 0.1)[0] == data.text("snips-intent")


def test_the_first_steps_see_every_intent() -> None:
    first = data.interleaved(snips_split("train"))[: len(SNIPS_INTENTS)]
    assert {i.category for i in first} == set(SNIPS_INTENTS)


@pytest.mark.engine
def test_prompt_tokens_are_fed_but_never_predicted() -> None:
    rows = [[*data.prompt_tokens([5, 6, 7]), 8, 9], [10, 11, 12]]
    ids, mask, labels = batch_tensors(rows, "cpu")
    assert ids.tolist() == [[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]]
    assert labels.tolist() == [[-100, -100, -100, 8, 9], [10, 11, 12, -100, -100]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert predicted_tokens(rows) == 2 + 2


@pytest.mark.engine
def test_the_example_split_reads_a_step_by_its_index() -> None:
    split = data.load_examples(TINY)
    assert len(split.rows) == len(data.examples("train"))
    assert len(split.eval_rows) == len(data.examples("fewshot"))
    again = data.load_examples(TINY)
    assert split.micro_batches(3, 4, 2, 64) == again.micro_batches(3, 4, 2, 64)
    assert all(len(r) <= 64 for mb in split.micro_batches(0, 4, 2, 64) for r in mb)
    assert all(any(t < 0 for t in r) for r in split.rows)  # every row has a masked prompt


def training_scenario(tmp_path: Path, lora: str, data_line: str = "") -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(
        "name: t\nmodels: [tiny-llama]\nbackend: [transformers]\ntargets: [cpu]\nrepeats: 1\n"
        "training:\n  method: [lora]\n  micro_batch: [1]\n  seq_len: [32]\n  steps: 1\n"
        f"  lora: {lora}\n" + data_line
    )
    return path


def test_a_lora_rank_above_the_smallest_targeted_dimension_is_refused(tmp_path: Path) -> None:
    # the tiny model's k_proj is 256 × 128: r = 129 is above min(in, out)
    result = CliRunner().invoke(
        app, ["plan", str(training_scenario(tmp_path, "{r: 129, targets: [q_proj, k_proj]}"))]
    )
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "lora.r 129" in line and "k_proj" in line and "128" in line


def test_a_lora_rank_at_the_bound_plans(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["plan", str(training_scenario(tmp_path, "{r: 128, targets: [k_proj]}"))]
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("pair", ["{train: snips, eval: tinyshakespeare}",
                                  "{train: tinyshakespeare, eval: snips}"])  # fmt: skip
def test_example_data_is_its_own_train_and_eval(tmp_path: Path, pair: str) -> None:
    path = training_scenario(tmp_path, "{r: 8}", f"  data: {pair}\n")
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 2, result.output
    assert "give it as both" in result.output
