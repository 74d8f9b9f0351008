"""The quality kinds, by name: what a task's ``kind`` selects (``base.Kind``: how its items are
read, scored on an engine, summarised, paired with the reference and listed in the error
analysis). An entry is ``"module:Class"``, imported on first use (``kind_of``); a new kind is one
file in this package and one line here.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, ClassVar, Protocol

from harness.errors import did_you_mean, one_of

REGISTRY: dict[str, str] = {
    "choice": "harness.tasks.kinds.choice:Choice",
    "classify": "harness.tasks.kinds.classify:Classify",
    "extract": "harness.tasks.kinds.extract:Extract",
    "exact": "harness.tasks.kinds.exact:Exact",
    "longctx": "harness.tasks.kinds.longctx:LongContext",
}
KINDS: tuple[str, ...] = tuple(REGISTRY)


class Kind(Protocol):
    """A kind as the rest of the package calls it (``base.Kind`` states it, typed): seen from
    here with the task types as Any, so this registry imports none of the kinds' modules (they
    import the task modules that look kinds up here)."""

    name: ClassVar[str]
    gold_keys: ClassVar[tuple[str, ...]]
    takes: ClassVar[frozenset[str]]
    needs: ClassVar[frozenset[str]]
    per_item: ClassVar[bool]
    generates: ClassVar[bool]
    figures: ClassVar[tuple[str, ...]]

    @property
    def answer_keys(self) -> tuple[str, ...]: ...
    def check_entry(self, entry: Any) -> str | None: ...
    def read_gold(self, entry: Any, data: dict[str, Any], where: Any) -> Any: ...
    def target(self, task: Any, item: Any) -> str: ...
    def work(self, task: Any) -> tuple[int, int]: ...
    def score(self, engine: Any, task: Any, prompts: list[str]) -> Any: ...
    def outcome(self, task: Any, raw: Any) -> Any: ...
    def units(self, outcome: Any) -> tuple[Any, Any, Any]: ...
    def summarize(self, task: Any, outcome: Any, score: Any) -> None: ...
    def category_score(self, outcome: Any, mask: Any) -> float: ...
    def misses(self, outcome: Any, ref_right: dict[str, bool]) -> list[Any]: ...


def unknown_kind(name: object) -> str:
    """The reason ``name`` is no kind: what was given, a near miss, and the kinds there are."""
    return f"{name!r} is not a task kind{did_you_mean(name, KINDS)}; expected one of: " + one_of(
        KINDS
    )


@functools.cache
def kind_of(name: str) -> Kind:
    """The kind registered as ``name`` (its module imported now); a KeyError saying which kinds
    there are for another name."""
    target = REGISTRY.get(name)
    if target is None:
        raise KeyError(unknown_kind(name))
    module, _, attribute = target.partition(":")
    made: Kind = getattr(importlib.import_module(module), attribute)()
    if made.name != name:
        raise RuntimeError(f"{target} calls itself {made.name!r}, registered as {name!r}")
    return made
