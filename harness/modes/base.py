"""The `Mode` contract: what a mode of a row (offline, serving, training) gives the core stages.

A mode is a package `harness/modes/<name>/` whose files each play one role, named by the file:

- `spec.py`     its scenario block and point payload (pydantic; imports `harness.spec` only)
- `points.py`   its points from a scenario, and why one cannot run (spec side)
- `plan.py`     its plan terms: a point's memory and seconds (imports `harness.plan`)
- `device/`     its device-side runner (`device/run.py`) and what only the device runs
- `price.py`    its rows' tables and prices (results side)
- `report.py`   its report sections (results side)
- any other file: pure helpers of the mode (the spec, measure and base rooms only)

The core never imports a mode module: it asks `harness.modes` for a part, and the part is
imported then, by its `"module:attr"` reference, as `backends.base.REGISTRY` does for engines.
`tests/test_architecture.py` derives each file's room from this naming.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal

# The parts a mode declares; each is a "module:attr" reference, or None where the mode has none.
Part = Literal["points", "skip_reason", "plan", "run", "price", "report"]
PARTS: tuple[Part, ...] = ("points", "skip_reason", "plan", "run", "price", "report")
# The file (module) that holds each part, inside the mode's package: the role of that file.
PART_MODULE: dict[Part, str] = {
    "points": "points",
    "skip_reason": "points",
    "plan": "plan",
    "run": "device.run",
    "price": "price",
    "report": "report",
}


@dataclass(frozen=True)
class Mode:
    """One mode: its name, what it is, and where each part lives ("module:attr", lazy)."""

    name: str
    summary: str
    parts: dict[Part, str | None]

    def ref(self, part: Part) -> str | None:
        return self.parts.get(part)

    def load(self, part: Part) -> Any:
        """The part's object, imported now; KeyError naming the mode when it has none."""
        ref = self.ref(part)
        if ref is None:
            raise KeyError(f"mode {self.name!r} has no {part!r} part")
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)


def mode(name: str, summary: str, **attrs: str | None) -> Mode:
    """A mode whose parts sit in their role's module: `mode("serving", ..., plan="serving_plan")`
    gives `harness.modes.serving.plan:serving_plan`; a part left out (or None) is absent."""
    unknown = set(attrs) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown mode parts {sorted(unknown)}; known: {', '.join(PARTS)}")
    parts: dict[Part, str | None] = {}
    for part in PARTS:
        attr = attrs.get(part)
        parts[part] = None if attr is None else f"harness.modes.{name}.{PART_MODULE[part]}:{attr}"
    return Mode(name=name, summary=summary, parts=parts)
