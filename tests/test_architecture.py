"""The import rules of ARCHITECTURE.md, read from the source with `ast` (nothing is imported but
the mode registry, whose references are checked against the files they name).

Rooms are derived from the tree: every module or package directly under `harness/` is a room, and
every file of a mode package (`harness/modes/<mode>/`) takes its role from its name
(`harness.modes.base`). A new folder or module without a rule below fails here, by name.
Every `import` counts, also those inside functions and under TYPE_CHECKING: a lazy import is
still a dependency of the room, only a cheaper one.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from harness import modes
from harness.modes.base import PART_MODULE

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "harness"
# Every engine or device library: imported only inside functions, anywhere in the package.
ENGINES = (
    "torch", "transformers", "vllm", "bitsandbytes", "gptqmodel", "optimum", "ray", "peft",
    "pynvml", "amdsmi", "accelerate",
)  # fmt: skip
BASE = (
    "harness", "harness.errors", "harness.units", "harness.atomic", "harness.files",
    "harness.console",
)  # fmt: skip
RESULTS_READS = (
    "harness.spec", "harness.row", "harness.run.store", "harness.measure", "harness.tasks",
)  # fmt: skip
RUN_READS = (
    "harness.spec", "harness.plan", "harness.budget", "harness.measure", "harness.backends",
    "harness.row", "harness.corpus", "harness.tasks",
)  # fmt: skip
# room → the rooms (module prefixes) it may import, besides itself, BASE and the mode registry.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "harness.spec": ("harness.tasks",),  # a scenario's task entries are the tasks room's
    "harness.tasks": ("harness.measure", "harness.row"),  # tasks as data, their metrics
    "harness.measure": (),
    "harness.row": (),
    "harness.corpus": (),
    "harness.plan": ("harness.spec", "harness.measure.roofline"),
    "harness.budget": ("harness.spec", "harness.plan"),  # the sweep's plan: points + phases
    "harness.backends": ("harness.spec", "harness.measure", "harness.corpus"),
    "harness.run": RUN_READS,
    "harness.results": (*RESULTS_READS, "harness.corpus"),
    "harness.modes": ("harness.spec",),  # the registry and the Mode contract: payload types only
    "harness.cli": (),  # the command line wires every room together
    "harness.bench": (),  # the benchmark tools behind `make perf` / `side-by-side`: like the CLI
}
WIRES_EVERYTHING = ("harness.cli", "harness.bench")
# What a file of a mode package may import, by its role (besides its own mode's files of the
# roles listed in SAME_MODE, BASE and the registry). "pure": any file without a role name.
ROLE_MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "spec": ("harness.spec",),
    "points": ("harness.spec",),
    "plan": ("harness.spec", "harness.plan", "harness.measure.roofline"),
    "device": (*RUN_READS, "harness.run"),
    "price": (*RESULTS_READS, "harness.results", "harness.corpus"),
    "report": (*RESULTS_READS, "harness.results", "harness.corpus"),
    "pure": ("harness.spec", "harness.measure", "harness.corpus", "harness.tasks"),
    "package": (),
}
SAME_MODE: dict[str, tuple[str, ...]] = {
    "spec": ("spec",),
    "points": ("spec", "pure"),
    "plan": ("spec", "pure"),
    "device": ("spec", "pure", "plan", "device"),
    "price": ("spec", "pure", "price"),
    "report": ("spec", "pure", "price", "report"),
    "pure": ("spec", "pure"),
    "package": (),
}
# The device side besides every mode's device/ folder: never imported by orchestration or results.
DEVICE_SIDE = (
    "harness.run.worker",
    "harness.run.host",
    "harness.run.device",
    "harness.backends.transformers",
    "harness.backends.vllm",
    "harness.measure.memory",
    "harness.measure.timing",
    "harness.measure.energy",
)
ORCHESTRATION = (
    "harness.run.contracts",
    "harness.run.forking",
    "harness.run.store",
    "harness.run.sweep",
    "harness.run.driver",
    "harness.run.node",
    "harness.run.provenance",
    "harness.run.auth",
)


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


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def room_of(name: str) -> str:
    """The room of a module: harness.<first part> (a top-level module or package)."""
    return ".".join(name.split(".")[:2])


def mode_of(name: str) -> str | None:
    """The mode a module belongs to (harness.modes.<mode>...), None outside the mode packages."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "modes" and parts[2] != "base" else None


def role_of(name: str) -> str:
    """A mode file's role from its place: device/ → device; spec/points/plan/price/report by
    file name; the package's own __init__ → package; anything else → pure."""
    rest = name.split(".")[3:]
    if not rest:
        return "package"
    if rest[0] == "device":
        return "device"
    return rest[0] if rest[0] in ROLE_MAY_IMPORT else "pure"


def is_device_side(name: str) -> bool:
    return any(within(name, d) for d in DEVICE_SIDE) or (
        mode_of(name) is not None and role_of(name) == "device"
    )


def test_the_package_is_found() -> None:
    assert {"harness.plan", "harness.run.worker", "harness.modes.serving.device.run"} <= set(
        modules()
    )


def test_every_room_of_the_tree_has_a_rule() -> None:
    rooms = {room_of(n) for n in modules() if n not in BASE}
    missing = sorted(rooms - set(MAY_IMPORT))
    assert not missing, (
        f"{missing} belong to no room: add a rule to MAY_IMPORT here and the room to "
        "ARCHITECTURE.md (what it holds, what it may import)"
    )


@pytest.mark.parametrize("name", ORCHESTRATION)
def test_orchestration_never_imports_the_device_side(name: str) -> None:
    assert not {m for m in harness_imports(name) if is_device_side(m)}


def test_results_never_import_the_device_side_or_the_run_internals() -> None:
    readers = [
        n
        for n in modules()
        if within(n, "harness.results") or (mode_of(n) and role_of(n) in ("price", "report"))
    ]
    for name in readers:
        bad = {
            m
            for m in harness_imports(name)
            if is_device_side(m) or (within(m, "harness.run") and m != "harness.run.store")
        }
        assert not bad, f"{name} imports {sorted(bad)}"


def test_the_core_reaches_a_mode_only_through_the_registry() -> None:
    broken = []
    for name in modules():
        if mode_of(name) is not None or within(name, "harness.modes"):
            continue
        for target in harness_imports(name):
            if mode_of(target) is not None:
                broken.append(f"{name} → {target}")
    assert not broken, "use harness.modes.get(name).load(part):\n" + "\n".join(broken)


def test_each_room_imports_only_the_rooms_before_it_in_the_flow() -> None:
    broken = []
    for name in modules():
        if name in BASE or mode_of(name) is not None:
            continue
        room = room_of(name)
        if room in WIRES_EVERYTHING:
            continue
        allowed = (room, *MAY_IMPORT[room], "harness.modes", "harness.modes.base")
        for target in harness_imports(name):
            if mode_of(target) is not None:
                allowed_mode = room == "harness.modes" and role_of(target) == "spec"
                if not allowed_mode:
                    broken.append(f"{name} → {target}")
            elif target not in BASE and not any(within(target, a) for a in allowed):
                broken.append(f"{name} → {target}")
    assert not broken, "imports against ARCHITECTURE.md:\n" + "\n".join(broken)


def test_each_mode_file_imports_only_what_its_role_may() -> None:
    broken = []
    for name in (n for n in modules() if mode_of(n) is not None):
        mode, role = mode_of(name), role_of(name)
        allowed = ROLE_MAY_IMPORT[role]
        for target in harness_imports(name):
            if target in BASE or target in ("harness.modes", "harness.modes.base"):
                continue
            if mode_of(target) is not None:
                ok = mode_of(target) == mode and role_of(target) in (*SAME_MODE[role], "package")
            else:
                ok = any(within(target, a) for a in allowed)
            if not ok:
                broken.append(f"{name} ({role}) → {target}")
    assert not broken, "mode files against their roles (harness/modes/base.py):\n" + "\n".join(
        broken
    )


def test_the_registry_names_every_mode_package_and_each_part_lives_in_its_role_file() -> None:
    packages = {p.name for p in (PACKAGE / "modes").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(modes.REGISTRY), "a mode package without a REGISTRY entry, or back"
    for mode in modes.REGISTRY.values():
        for part, module in PART_MODULE.items():
            ref = mode.ref(part)
            if ref is None:
                continue
            assert ref.partition(":")[0] == f"harness.modes.{mode.name}.{module}", ref
            assert mode.load(part) is not None, ref


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


def folders_and_modes() -> list[str]:
    """Every package folder of harness/ (its own name, as `name/` is written on the maps) and
    every mode name."""
    folders = sorted(
        {
            p.parent.name
            for p in PACKAGE.rglob("__init__.py")
            if p.parent != PACKAGE and "data" not in p.parent.relative_to(PACKAGE).parts
        }
    )
    return [*folders, *modes.REGISTRY]


@pytest.mark.parametrize("doc", ["ARCHITECTURE.md", "README.md"])
def test_every_package_folder_and_mode_is_on_the_maps(doc: str) -> None:
    text = (ROOT / doc).read_text()
    if doc == "README.md":
        text = text[text.index("## Layout") :]
        text = text[: text.index("\n## ", 1)]
    missing = [f for f in folders_and_modes() if not re.search(rf"\b{re.escape(f)}/", text)]
    assert not missing, f"{doc} does not show {missing}"
