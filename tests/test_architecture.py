"""The import rules of ARCHITECTURE.md, read from the source with `ast` (nothing is imported).

Every `import` counts, also those inside functions and under TYPE_CHECKING: a lazy import is
still a dependency of the room, only a cheaper one.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "harness"
ENGINES = ("torch", "transformers", "vllm", "bitsandbytes", "gptqmodel", "optimum", "ray")

# The worker and what only it (or an engine) runs: never imported by orchestration or results.
DEVICE_SIDE = (
    "harness.run.worker",
    "harness.backends.transformers",
    "harness.backends.vllm",
    "harness.measure.memory",
    "harness.measure.timing",
    "harness.measure.energy",
    "harness.serve.server",
    "harness.serve.loadgen",
    "harness.run.serving",
    "harness.train.trainer",
    "harness.train.checks",
    "harness.run.training",
)
ORCHESTRATION = (
    "harness.run.contracts",
    "harness.run.store",
    "harness.run.sweep",
    "harness.run.driver",
    "harness.run.node",
    "harness.run.provenance",
)
BASE = ("harness", "harness.errors", "harness.units", "harness.atomic", "harness.console")
# room → the rooms (module prefixes) it may import, besides itself and BASE.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "harness.spec": (),
    "harness.measure": (),
    "harness.row": (),
    "harness.corpus": (),
    "harness.plan": ("harness.spec", "harness.measure.roofline", "harness.train.memory"),
    "harness.train": ("harness.spec", "harness.measure", "harness.corpus"),
    "harness.backends": ("harness.spec", "harness.measure", "harness.corpus"),
    "harness.serve": ("harness.corpus",),
    "harness.run": (
        "harness.spec",
        "harness.plan",
        "harness.measure",
        "harness.backends",
        "harness.row",
        "harness.corpus",
        "harness.serve",
        "harness.train",
    ),
    "harness.results": (
        "harness.spec",
        "harness.row",
        "harness.run.store",
        "harness.measure",
        "harness.corpus",
    ),
    "harness.cli": (),  # the command line wires every room together
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, *, top_level_only: bool = False) -> set[str]:
    """Absolute names a module imports (`from a import b` gives a.b when a.b is a module)."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules() else node.module)
    return found


def harness_imports(name: str, *, top_level_only: bool = False) -> set[str]:
    found = imports_of(modules()[name], top_level_only=top_level_only)
    return {m for m in found if m == "harness" or m.startswith("harness.")}


def room_of(name: str) -> str:
    room = next((r for r in sorted(MAY_IMPORT, key=len, reverse=True) if within(name, r)), None)
    if room is None:
        pytest.fail(
            f"{name} belongs to no room: add its room to MAY_IMPORT here and to ARCHITECTURE.md "
            "(what it holds, what it may import)"
        )
    return room


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_the_package_is_found() -> None:
    assert {"harness.plan", "harness.run.worker", "harness.results.publish"} <= set(modules())


@pytest.mark.parametrize("name", ORCHESTRATION)
def test_orchestration_never_imports_the_device_side(name: str) -> None:
    assert not {m for m in harness_imports(name) if m.startswith(DEVICE_SIDE)}


def test_results_never_import_the_device_side_or_the_run_internals() -> None:
    for name in (n for n in modules() if within(n, "harness.results")):
        bad = {
            m
            for m in harness_imports(name)
            if m.startswith(DEVICE_SIDE) or (within(m, "harness.run") and m != "harness.run.store")
        }
        assert not bad, f"{name} imports {sorted(bad)}"


def test_each_room_imports_only_the_rooms_before_it_in_the_flow() -> None:
    broken = []
    for name in modules():
        room = "" if name in BASE else room_of(name)
        if room in ("", "harness.cli"):  # the base imports no room (below); the CLI may use all
            continue
        allowed = (room, *MAY_IMPORT[room])
        for target in harness_imports(name):
            if target not in BASE and not any(within(target, a) for a in allowed):
                broken.append(f"{name} → {target}")
    assert not broken, "imports against ARCHITECTURE.md:\n" + "\n".join(broken)


def test_base_modules_import_no_room() -> None:
    for name in BASE:
        assert harness_imports(name) <= set(BASE) - {name}, name


def test_no_import_cycles() -> None:
    """Among all imports, lazy ones included: a cycle would make the rooms' order meaningless."""
    graph = {name: harness_imports(name) & set(modules()) for name in modules()}
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(name: str, stack: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if target == name:
                continue
            if state.get(target) == 1:
                cycle = [*stack[stack.index(target) :], target]
                pytest.fail("import cycle: " + " → ".join(cycle))
            if target not in state:
                visit(target, [*stack, target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_engines_are_imported_only_inside_functions() -> None:
    """`harness plan` and `harness aggregate` start fast and run where no engine is installed."""
    for name, path in modules().items():
        top = imports_of(path, top_level_only=True)
        engines = {m for m in top if m.split(".")[0] in ENGINES}
        assert not engines, f"{name} imports {sorted(engines)} at module level"
