"""The `Mode` contract: what a mode of a row (offline, serving, training) gives the core stages.

A mode is a package `harness/modes/<name>/` whose files each play one role, named by the file:

- `spec.py`     its scenario block and point payload (pydantic; imports `harness.spec` only)
- `points.py`   its points from a scenario, why one cannot run, and the files a point reads
                (spec side)
- `plan.py`     its plan terms: a point's memory and seconds (imports `harness.plan`)
- `device/`     its device-side runner (`device/run.py`) and what only the device runs
- `price.py`    its rows' tables and prices (results side)
- `report.py`   its report sections (results side)
- `manifest.py` what it adds to a run's manifest before anything runs (pure)
- `admission.py` its rows' own consistency check, read where rows are admitted (results side)
- `columns.py`  its published columns, declared as `harness.results.columns` declares one
                (plain tuples; imports `harness.units` only)
- any other file: pure helpers of the mode (the spec, measure and base rooms only)

The core never imports a mode module: it asks `harness.modes` for a part, and the part is
imported then, by its `"module:attr"` reference, as `backends.base.REGISTRY` does for engines.
Besides its parts a mode states its facts (`Facts`): the budget phase of its
points and the row field that measures it, a phase its groups pay once (serving: the server's
start), whether its groups may fork from a node's host, its point payload, the tables it fills:
the core reads these from the registry and never names a mode.
`tests/test_architecture.py` derives each file's room from this naming.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, TypeVar

# The parts a mode declares; each is a "module:attr" reference, or None where the mode has none.
# `inputs`: the files a point reads beyond its model (what, path), hashed into its key
# (harness.spec.inputs)
# `check`: why one of its rows cannot be trusted (harness.results.admission), None: it can
Part = Literal[
    "points",
    "skip_reason",
    "inputs",
    "plan",
    "run",
    "price",
    "report",
    "manifest",
    "check",
    "columns",
]
PARTS: tuple[Part, ...] = (
    "points", "skip_reason", "inputs", "plan", "run", "price", "report", "manifest", "check",
    "columns",
)  # fmt: skip
# The file (module) that holds each part, inside the mode's package: the role of that file.
PART_MODULE: dict[Part, str] = {
    "points": "points",
    "skip_reason": "points",
    "inputs": "points",
    "plan": "plan",
    "run": "device.run",
    "price": "price",
    "report": "report",
    "manifest": "manifest",
    "check": "admission",
    "columns": "columns",
}


@dataclass(frozen=True)
class GroupStart:
    """A phase a group with points of the mode pays once, before them (serving: its server's
    start): the budget's phase name and label, its default seconds before any history, and the
    row field that measures it (harness.run.history)."""

    phase: str
    label: str
    default_s: float
    figure: str


@dataclass(frozen=True)
class Facts:
    """What the core stages read of a mode besides its parts.

    phase / phase_label: the budget phase its points' seconds are (harness.budget.PHASES);
    figure: the row field that measures a point's seconds in it (harness.run.history);
    start: a phase its groups pay once before its points (None: none);
    scores_quality: its groups score the quality phase once, and each row's `figure` carries its
      share of it (offline);
    step_floor: a point takes at least the engine's decode-step floor per step (offline);
    load_per_point: the model is loaded once per point, not once per group (training);
    forks: a group with points of it may run in a child forked from its node's host (False: the
      mode starts processes of its own, serving's server: a fresh process);
    payload: its points carry a payload field named after it (``Point.<name>``), in its key, and
      grouped by its ``label`` where ``GroupKey`` has a field of that name;
    standalone: its scenario block alone makes points (the inference axes may be left out);
    generates: its rows generate output tokens (False: `output_tokens` 0 is its rows' own);
    levels: its rows are load levels (a row's `level` names one);
    never_reference: why its rows are never the reference (None: they may be);
    tables: the fields of the results' ``Aggregate`` its `price` part fills (each an empty
      table where it has no rows).
    """

    phase: str
    phase_label: str
    figure: str = ""
    start: GroupStart | None = None
    scores_quality: bool = False
    step_floor: bool = False
    load_per_point: bool = False
    forks: bool = True
    payload: bool = False
    standalone: bool = False
    generates: bool = True
    levels: bool = False
    never_reference: str | None = None
    tables: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mode:
    """One mode: its name, what it is, where each part lives ("module:attr", lazy), its facts."""

    name: str
    summary: str
    parts: dict[Part, str | None]
    facts: Facts

    def ref(self, part: Part) -> str | None:
        return self.parts.get(part)

    def load(self, part: Part) -> Any:
        """The part's object, imported now; KeyError naming the mode when it has none."""
        ref = self.ref(part)
        if ref is None:
            raise KeyError(f"mode {self.name!r} has no {part!r} part")
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)


def mode(name: str, summary: str, facts: Facts | None = None, **attrs: str | None) -> Mode:
    """A mode whose parts sit in their role's module: `mode("serving", ..., plan="serving_plan")`
    gives `harness.modes.serving.plan:serving_plan`; a part left out (or None) is absent. Its
    facts default to a phase of its own name and nothing else."""
    unknown = set(attrs) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown mode parts {sorted(unknown)}; known: {', '.join(PARTS)}")
    parts: dict[Part, str | None] = {}
    for part in PARTS:
        attr = attrs.get(part)
        parts[part] = None if attr is None else f"harness.modes.{name}.{PART_MODULE[part]}:{attr}"
    facts = facts or Facts(phase=name, phase_label=name)
    return Mode(name=name, summary=summary, parts=parts, facts=facts)


# --- the results side's contract: a mode's `price` and `report` parts ---------------------------
# Typing only (pandas and the core's `Aggregate` belong to the results side; this module stays
# cheap to import for the spec side): the core's `Aggregate` is the type parameter `R` below.

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd

R_contra = TypeVar("R_contra", contravariant=True)

Column: TypeAlias = tuple[str, str, Callable[[Any], str] | None]
"""One column of an HTML table: (field, header, formatter; None = text)."""
MdTable: TypeAlias = Callable[[Sequence[dict[str, str]]], str]
"""The core's Markdown table (``publish.markdown.md_table``): rows of header → cell text."""
HtmlTable: TypeAlias = Callable[["pd.DataFrame", Sequence[Column], str], str]
"""The core's sortable HTML table (``publish.html.html_table``): (frame, columns, table id)."""


class Priced(Protocol):
    """What a mode's `price` part returns for its rows."""

    @property
    def tables(self) -> Mapping[str, pd.DataFrame]:
        """Its tables by name; each name is one its registry entry declares (`Facts.tables`),
        read on the core's `Aggregate` with ``table(name)``."""
        ...

    @property
    def counts(self) -> Mapping[str, Any]:
        """Its entries of the aggregation's counts (rows read, by status, ...)."""
        ...

    def with_cost(self, cost: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
        """cost.csv (offline rows × packages, ``point_index`` into the offline ``points``) with
        this mode's columns or rows added."""
        ...


class PricePart(Protocol):
    """A mode's `price` part: ``price(rows, points, packages, utilisation)``.

    ``rows``: the normalised, flagged rows of this mode (``mode == name``); ``points``: the
    offline rows, gated (quality class, ``pass_<class>``) and with their energy columns;
    ``packages``: one row per tariff package (``harness.results.pricing.packages_frame``);
    ``utilisation``: the share of a package's hours the node works, in (0, 1]. Prices use
    ``harness.results.pricing``'s formulas."""

    def __call__(
        self, rows: pd.DataFrame, points: pd.DataFrame, packages: pd.DataFrame, utilisation: float
    ) -> Priced: ...


class ReportPart(Protocol[R_contra]):
    """A mode's `report` part: its sections of README.md and of report.html, from the core's
    aggregation (``R_contra``: ``harness.results.aggregate.Aggregate``), laid out with the core's
    table functions; [] when the run has nothing of this mode."""

    def markdown(self, result: R_contra, quality_class: str, table: MdTable) -> list[str]: ...

    def html(self, result: R_contra, quality_class: str, table: HtmlTable) -> list[str]: ...

    def summary(self, result: R_contra) -> dict[str, pd.DataFrame]:
        """Its entries of summary.json, by key: the tables a reader of the summary needs."""
        ...
