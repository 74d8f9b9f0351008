"""harness.modes.training.manifest: a run's manifest carries the n-gram leakage table of what its
models saw against what it scores (the fine-tuning data of a training scenario, its tasks) and a
warning line per scored task that shares n-grams with a text seen."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from harness.modes.training import leakage
from harness.modes.training.leakage import Text
from harness.modes.training.manifest import manifest_entries
from harness.spec import scenario

ROOT = Path(__file__).resolve().parents[3]
TRAINING = (ROOT / "scenarios" / "training.yaml").read_text()
WORDS = " ".join(f"w{i}" for i in range(40))  # 40 distinct words: 40 − 13 + 1 = 28 13-grams


@pytest.fixture
def asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, object]]:
    """The texts are small planted ones; what the manifest asked for is recorded."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    calls: list[tuple[object, object]] = []

    def shipped(
        train_data: Iterable[tuple[str, float]] = (), tasks: Iterable[tuple[str, str]] = ()
    ) -> tuple[list[Text], list[Text]]:
        calls.append((list(train_data), [name for name, _ in tasks]))
        seen = [Text("train block", "seen", WORDS)]
        # the task shares the first 20 words: 20 − 13 + 1 = 8 of its 13-grams
        evals = [
            Text("eval block", "eval", "unrelated words only here " * 5),
            Text(f"{leakage.TASK_EVAL}leaky", "eval", " ".join(WORDS.split()[:20])),
        ]
        return seen, evals

    monkeypatch.setattr(leakage, "shipped_texts", shipped)
    return calls


def test_a_training_scenario_checks_its_train_block_and_its_tasks(
    asked: list[tuple[object, object]],
) -> None:
    text = TRAINING + "quality: {tasks: [snips-intent]}\n"
    entries = manifest_entries(scenario.parse(text))
    # the scenario's data set with its eval fraction (training.yaml: tinyshakespeare, 0.1), and
    # every task the configurations are scored on: ARC-Easy too (quality.arc_items' default 100)
    assert asked == [([("tinyshakespeare", 0.1)], ["snips-intent", "arc-easy"])]
    table = {(row["seen"], row["eval"]): row for row in entries["leakage"]}
    assert len(table) == 2  # 1 seen × 2 eval texts
    assert table[("train block", "eval block")]["shared"] == 0
    leaky = table[("train block", "task leaky")]
    assert (leaky["shared"], leaky["eval_ngrams"]) == (8, 8)  # all 8 of its 13-grams
    (warning,) = entries["leakage_warnings"]
    assert warning.startswith("task leaky shares 8 of its 8 distinct 13-grams with train block")


def test_a_run_without_training_still_checks_what_its_quantizers_saw(
    asked: list[tuple[object, object]],
) -> None:
    plain = scenario.load(ROOT / "tests" / "fixtures" / "tiny-sweep.yaml")
    entries = manifest_entries(plain)
    # no fine-tuning data; its one task ARC-Easy (arc_items), with the shipped texts
    assert asked == [([], ["arc-easy"])]
    assert len(entries["leakage"]) == 2
