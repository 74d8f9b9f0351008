"""The exact kind: a greedy generation right when its normalised text is the normalised answer;
read from a task file, scored through an engine, summarised and paired like every kind."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.tasks import metrics
from harness.tasks.kinds import kind_of
from harness.tasks.kinds.exact import normalise
from harness.tasks.spec import TaskFile, TaskSpec, load_task_file, render_target


def write(path: Path, rows: Sequence[Mapping[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def capital_task(tmp_path: Path, max_new_tokens: int = 8) -> TaskSpec:
    rows = [
        {"id": "fr", "text": "France", "answer": "Paris", "category": "europe"},
        {"id": "jp", "text": "Japan", "answer": "Tokyo", "category": "asia"},
        {"id": "it", "text": "Italy", "answer": "Rome", "category": "europe"},
    ]
    entry = TaskFile(path=str(write(tmp_path / "capitals.jsonl", rows)), kind="exact",
                     prompt="Capital of {text}:", max_new_tokens=max_new_tokens)  # fmt: skip
    return load_task_file(entry)


class Engine:
    """Answers each prompt from a table; records what it was asked."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers, self.asked = answers, []  # type: ignore[var-annotated]

    def score_continuations(self, pairs: list[tuple[str, str]]) -> list[float]:
        raise AssertionError("an exact task generates, it scores no continuation")

    def generate_text(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        self.asked.append((prompts, max_new_tokens))
        return [self.answers[p] for p in prompts]


def test_normalising_keeps_the_first_line_folds_case_and_space_and_drops_a_full_stop() -> None:
    assert normalise("  The   PARIS.\nQuestion: next") == "the paris"
    assert normalise("ﬁne") == "fine"  # NFKC: the ligature is two letters
    assert normalise("Rome..") == "rome."  # one full stop dropped, not every one
    assert normalise("Paris") != normalise("Paris, France")


def test_an_exact_task_file_is_read_and_its_answer_is_the_gold_continuation(
    tmp_path: Path,
) -> None:
    task = capital_task(tmp_path)
    assert task.kind == "exact" and [i.id for i in task.scored] == ["fr", "jp", "it"]
    assert render_target(task, task.scored[1]) == " Tokyo"
    assert kind_of("exact").work(task) == (0, 24)  # 3 items × 8 new tokens, no continuation


def test_a_line_without_its_answer_is_refused_naming_its_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", [{"id": "a", "text": "x", "answer": "y"},
                                        {"id": "b", "text": "x"}])  # fmt: skip
    with pytest.raises(UserInputError) as err:
        load_task_file(TaskFile(path=str(path), kind="exact", prompt="Q: {text}"))
    assert ":2" in str(err.value) and "answer" in str(err.value)


def test_a_prompt_that_names_the_answer_is_refused() -> None:
    with pytest.raises(ValueError, match="answer"):
        TaskFile(path="t.jsonl", kind="exact", prompt="Q: {text} A: {answer}")


def test_outputs_are_scored_by_exact_match_through_the_engine(tmp_path: Path) -> None:
    task = capital_task(tmp_path)
    engine = Engine({"Capital of France:": " paris.\nCapital of Spain: Madrid",
                     "Capital of Japan:": " Kyoto", "Capital of Italy:": " Rome"})  # fmt: skip
    prompts = [f"Capital of {c}:" for c in ("France", "Japan", "Italy")]
    got = kind_of("exact").score(engine, task, prompts)
    assert engine.asked == [(prompts, 8)]
    # "paris." → "paris" = "paris"; "kyoto" ≠ "tokyo"; "rome" = "rome"
    assert got.correct.tolist() == [True, False, True]
    assert got.gold.tolist() == ["Paris", "Tokyo", "Rome"]


def test_the_summary_pairs_items_with_the_reference_and_lists_the_flip(tmp_path: Path) -> None:
    task = capital_task(tmp_path)
    ref = metrics.outcome_of(task, ["Paris", "Tokyo", "Rome"])
    cand = metrics.outcome_of(task, ["Paris", "Kyoto", "Rome"])
    score = metrics.summarize("capitals", task, cand, ref)
    # accuracy 2/3; the reference 3/3; diff = 3/3 − 2/3 = 1/3 over 3 paired items
    assert score.score == pytest.approx(2 / 3) and score.ref_rate == pytest.approx(1.0)
    assert score.diff == pytest.approx(1 / 3) and score.paired_units == 3 == score.units
    assert {c.category: c.score for c in score.categories} == {"asia": 0.0, "europe": 1.0}
    assert score.worst_category == "asia"  # 1 − 0 = 1 against europe's 1 − 1 = 0
    misses = kind_of("exact").misses(cand, {"fr": True, "jp": True, "it": True})
    assert [(m.item, m.change) for m in misses] == [("jp", "right_to_wrong")]
    assert misses[0].excerpt == "predicted Kyoto, gold Tokyo"


def test_an_exact_outcome_survives_the_run_folders_arrays(tmp_path: Path) -> None:
    task = capital_task(tmp_path)
    cand = metrics.outcome_of(task, ["Paris", "Kyoto", "Rome"])
    back = metrics.from_arrays(metrics.to_arrays("capitals", cand))["capitals"]
    assert back.kind == "exact" and back.correct.tolist() == [True, False, True]


@pytest.mark.engine  # the shipped tiny model on transformers
def test_the_kind_scores_the_tiny_model_s_greedy_text_against_each_answer(
    tmp_path: Path, tiny_backend: object
) -> None:
    """Golden: the shipped tiny model (transformers, CPU, fp32, greedy) writes " , and the S"
    after "Capital of France:" and "s , and the" after "Capital of Japan:" in 4 tokens. France's
    answer ", and the s." is that text normalised (case, spaces, the final stop): right; Japan's
    "Tokyo" is not: wrong."""
    rows = [
        {"id": "fr", "text": "France", "answer": ", and the s."},
        {"id": "jp", "text": "Japan", "answer": "Tokyo"},
    ]
    entry = TaskFile(path=str(write(tmp_path / "own.jsonl", rows)), kind="exact",
                     prompt="Capital of {text}:", max_new_tokens=4)  # fmt: skip
    task = load_task_file(entry)
    prompts = ["Capital of France:", "Capital of Japan:"]
    got = kind_of("exact").score(tiny_backend, task, prompts)
    assert got.predicted.tolist() == [" , and the S", "s , and the"]
    assert got.correct.tolist() == [True, False]
