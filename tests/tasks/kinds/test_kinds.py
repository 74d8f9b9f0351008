"""The kinds' registry: each name resolves lazily to its class, a wrong name is refused with the
kinds there are, and a task file's kind is checked against it."""

from __future__ import annotations

import pytest

from harness.tasks import kinds
from harness.tasks.kinds.base import Kind
from harness.tasks.spec import TaskFile


def test_every_registered_kind_resolves_to_its_class_under_its_name() -> None:
    assert kinds.KINDS == ("choice", "classify", "extract", "exact", "longctx")
    for name in kinds.KINDS:
        made = kinds.kind_of(name)
        assert isinstance(made, Kind) and made.name == name
        assert kinds.kind_of(name) is made  # one instance per kind


def test_an_unknown_kind_names_the_near_miss_and_the_kinds_there_are() -> None:
    with pytest.raises(KeyError, match=r"did you mean 'choice'\?.*choice, classify, extract"):
        kinds.kind_of("choise")


def test_a_task_file_with_an_unregistered_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="'regress' is not a task kind"):
        TaskFile(path="t.jsonl", kind="regress", prompt="{text}")


def test_an_option_of_another_kind_is_refused_naming_the_kind_that_takes_it() -> None:
    with pytest.raises(ValueError, match="`labels` is for classify tasks, not choice"):
        TaskFile(path="t.jsonl", kind="choice", prompt="{text}", labels=["a", "b"])
    with pytest.raises(ValueError, match="a classify task needs `labels`"):
        TaskFile(path="t.jsonl", kind="classify", prompt="{text}")
