"""The checks before a training campaign, on the shipped tiny model (CPU, seeded): each passes
as configured, and each fails when deliberately broken."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.modes.training import data
from harness.modes.training.device import checks, trainer
from harness.modes.training.spec import TrainingPoint
from harness.spec import models

# Loads an engine or starts Ray: not in `make test-fast` (tests/conftest.py).
pytestmark = pytest.mark.engine

TINY = str(models.PACKAGE_DATA / "tiny-llama")


@pytest.fixture(scope="module")
def split() -> data.Split:
    return data.load_split(TINY, "tinyshakespeare", "tinyshakespeare", 0.1)


def full_model() -> object:
    train = TrainingPoint(method="full", micro_batch=4, grad_accum=1, seq_len=32, steps=1)
    return trainer.load_model(TINY, train, "cpu", seed=0)


def test_accumulation_gives_the_same_gradients_with_token_normalised_loss(
    split: data.Split,
) -> None:
    model = full_model()
    equal = split.train[:128]
    same = [equal[i * 32 : (i + 1) * 32] for i in range(4)]
    padded = [same[0], same[1][:20], same[2][:9], same[3][:27]]
    for sequences in (same, padded):
        result = checks.accumulation_equivalence(model, sequences, normalisation="token")
        assert result.passed, f"max relative difference {result.max_rel_diff:.2e}"
    # without padding the per-micro-batch mean is the same thing: it holds there too
    plain = checks.accumulation_equivalence(model, same, normalisation="micro-mean")
    assert plain.passed, f"max relative difference {plain.max_rel_diff:.2e}"


def test_accumulation_check_fails_with_padding_and_a_per_micro_batch_mean(
    split: data.Split,
) -> None:
    model = full_model()
    same = [split.train[i * 32 : (i + 1) * 32] for i in range(4)]
    padded = [same[0], same[1][:20], same[2][:9], same[3][:27]]
    broken = checks.accumulation_equivalence(model, padded, normalisation="micro-mean")
    assert not broken.passed and broken.padded
    assert broken.max_rel_diff > 100 * broken.tolerance  # not rounding: a different objective


def resume_point() -> TrainingPoint:
    return TrainingPoint(method="lora", micro_batch=2, grad_accum=2, seq_len=32, steps=6, lr=1e-2)


def test_resume_continues_the_loss_trajectory_identically(split: data.Split) -> None:
    train = resume_point()

    def batches(step: int) -> list[list[list[int]]]:
        return split.micro_batches(step, train.micro_batch, train.grad_accum, train.seq_len)

    result = checks.resume_trajectory(TINY, train, batches, stop_after=3)
    assert result.passed, (result.uninterrupted, result.resumed)
    assert len(result.resumed) == 3


def test_resume_check_fails_when_the_optimizer_state_is_not_restored(split: data.Split) -> None:
    train = resume_point()

    def batches(step: int) -> list[list[list[int]]]:
        return split.micro_batches(step, train.micro_batch, train.grad_accum, train.seq_len)

    broken = checks.resume_trajectory(TINY, train, batches, stop_after=3, optimizer_state=False)
    assert not broken.passed
    assert broken.resumed[0] == broken.uninterrupted[0]  # the first step after it is computed
    # before the optimizer's moments matter; the ones after it are not
    assert broken.max_abs_diff > 1e-4


def test_the_split_is_two_contiguous_blocks_and_a_step_reads_by_index(split: data.Split) -> None:
    whole = data.tokenize(TINY, "tinyshakespeare")
    assert split.train + split.eval == whole
    assert len(split.eval) == len(whole) - data.split_point(len(whole), 0.1)
    first = split.micro_batches(5, 2, 2, 16)
    assert first == split.micro_batches(5, 2, 2, 16)
    assert first[0][0] == split.train[5 * 4 * 16 : 5 * 4 * 16 + 16]


def test_save_writes_what_a_resume_needs(tmp_path: Path, split: data.Split) -> None:
    train = resume_point()
    run = trainer.Trainer(trainer.load_model(TINY, train, "cpu"), train, "cpu")
    run.run_step(split.micro_batches(0, 2, 2, 32))
    run.save(tmp_path)
    again = trainer.Trainer(trainer.load_model(TINY, train, "cpu", seed=1), train, "cpu")
    again.load(tmp_path)
    assert again.step == 1
    for (name, a), (_, b) in zip(trainer.trainable(run.model), trainer.trainable(again.model),
                                 strict=True):  # fmt: skip
        assert (a == b).all(), name
