"""The import rules of the map (docs/development/architecture.md), read from the source with
`ast` (nothing is imported but the mode registry, whose references are checked against the files
they name).

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
# The one map of the tree: its rooms, their import rules, and the layout.
MAP = ROOT / "docs" / "development" / "architecture.md"
# Every engine or device library: imported only inside functions, anywhere in the package.
ENGINES = (
    "torch", "transformers", "vllm", "bitsandbytes", "gptqmodel", "optimum", "ray", "peft",
    "pynvml", "amdsmi", "accelerate", "llama_cpp", "sglang", "gguf",
)  # fmt: skip
BASE = (
    "harness", "harness.errors", "harness.units", "harness.atomic", "harness.files",
    "harness.console", "harness.csvtext",
)  # fmt: skip
RESULTS_READS = (
    "harness.spec", "harness.row", "harness.run.store", "harness.measure", "harness.tasks",
)  # fmt: skip
RUN_READS = (
    "harness.spec", "harness.plan", "harness.budget", "harness.measure", "harness.backends",
    "harness.row", "harness.corpus", "harness.tasks",
)  # fmt: skip
PROJECTION_READS = (
    "harness.spec", "harness.plan", "harness.budget", "harness.measure", "harness.results",
)  # fmt: skip
# room → the rooms (module prefixes) it may import, besides itself, BASE and the mode registry.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "harness.spec": ("harness.tasks",),  # a scenario's task entries are the tasks room's
    # tasks as data, their metrics; ARC-Easy's file ships in (and is hashed with) the corpus
    "harness.tasks": ("harness.measure", "harness.row", "harness.corpus"),
    "harness.measure": (),
    "harness.row": (),
    "harness.corpus": (),
    "harness.plan": ("harness.spec", "harness.measure.roofline"),
    "harness.budget": ("harness.spec", "harness.plan"),  # the sweep's plan: points + phases
    "harness.backends": ("harness.spec", "harness.measure", "harness.corpus"),
    "harness.run": RUN_READS,
    "harness.results": (*RESULTS_READS, "harness.corpus"),
    "harness.modes": ("harness.spec",),  # the registry and the Mode contract: payload types only
    # before you rent: after the results in the flow (their prices), the plan's budget
    "harness.projection": PROJECTION_READS,
    # price feeds → tariff files (spec); the verdict across feeds re-prices results
    "harness.prices": ("harness.spec", "harness.results"),
    "harness.cli": (),  # the command line wires every room together
    "harness.peers": (),  # the benchmark tools behind `make perf` / `side-by-side`: like the CLI
}
WIRES_EVERYTHING = ("harness.cli", "harness.peers")
# What a file of a mode package may import, by its role (besides its own mode's files of the
# roles listed in SAME_MODE, BASE and the registry). "pure": any file without a role name.
ROLE_MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "spec": ("harness.spec",),
    "points": ("harness.spec",),
    "plan": ("harness.spec", "harness.plan", "harness.measure.roofline"),
    "device": (*RUN_READS, "harness.run"),
    "price": (*RESULTS_READS, "harness.results", "harness.corpus"),
    "report": (*RESULTS_READS, "harness.results", "harness.corpus"),
    "admission": ("harness.row", "harness.results.admission"),  # its rows' own check
    "columns": (),  # its published columns: plain tuples (units from BASE)
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
    "admission": ("spec", "pure"),
    "columns": (),
    "pure": ("spec", "pure"),
    "package": (),
}
# The device side besides every mode's device/ folder: never imported by orchestration or results.
DEVICE_SIDE = (
    "harness.run.worker",
    "harness.run.host",
    "harness.run.device",
    "harness.backends.transformers.backend",
    "harness.backends.vllm",
    "harness.backends.llamacpp.backend",
    "harness.backends.llamacpp.gguf",
    "harness.backends.sglang.backend",
    "harness.backends.llamacpp.server",
    "harness.backends.sglang.server",
    "harness.measure.memory",
    "harness.measure.timing",
    "harness.measure.energy",
)
ORCHESTRATION = (
    "harness.run.session",
    "harness.run.launchers",
    "harness.run.launchers.base",
    "harness.run.launchers.inline",
    "harness.run.launchers.forked",
    "harness.run.launchers.actor",
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
        "docs/development/architecture.md (what it holds, what it may import)"
    )


@pytest.mark.parametrize("name", ORCHESTRATION)
def test_orchestration_never_imports_the_device_side(name: str) -> None:
    assert not {m for m in harness_imports(name) if is_device_side(m)}


def test_results_never_import_the_device_side_or_the_run_internals() -> None:
    readers = [
        n
        for n in modules()
        if within(n, "harness.results")
        or (mode_of(n) and role_of(n) in ("price", "report", "admission"))
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
    assert not broken, "imports against docs/development/architecture.md:\n" + "\n".join(broken)


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


def folder_of(name: str) -> str:
    """A module's folder: its package (a module directly under harness/ is a room of its own)."""
    if name == "harness" or modules()[name].stem == "__init__" or name.count(".") == 1:
        return name
    return name.rpartition(".")[0]


def folder_loops() -> list[frozenset[str]]:
    """The folder-level import loops: each strongly connected set of two or more folders (Tarjan)
    in the graph of imports between folders, lazy ones included; top-level base modules out."""
    graph: dict[str, set[str]] = {}
    for name in modules():
        if name in BASE:
            continue
        for target in harness_imports(name) & set(modules()) - set(BASE):
            if folder_of(target) != folder_of(name):
                graph.setdefault(folder_of(name), set()).add(folder_of(target))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[frozenset[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = {stack.pop()}
            while node not in members:
                members.add(stack.pop())
            if len(members) > 1:
                loops.append(frozenset(members))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return loops


# The folder-level loops the tree still has (issue 44.3), each to shrink, never to grow:
# - the registry (harness.modes) imports the serving and training payload types that the core's
#   Scenario / Point embed, so spec → modes → a mode → results/plan/run → spec;
# - harness.tasks.metrics and .spec read the kinds' registry, whose kinds read tasks' metrics.
KNOWN_FOLDER_LOOPS = (
    frozenset({
        "harness.backends", "harness.backends.vllm", "harness.budget", "harness.modes",
        "harness.modes.serving", "harness.modes.serving.price", "harness.modes.training",
        "harness.plan", "harness.results", "harness.results.publish", "harness.run",
        "harness.run.launchers", "harness.spec", "harness.spec.catalog",
    }),
    frozenset({"harness.tasks", "harness.tasks.kinds"}),
)  # fmt: skip


def test_no_new_folder_level_import_loop() -> None:
    """A loop between folders makes their order meaningless even when no module loops; the
    known ones (KNOWN_FOLDER_LOOPS) may only shrink."""
    grown = [
        sorted(loop) for loop in folder_loops() if not any(loop <= k for k in KNOWN_FOLDER_LOOPS)
    ]
    assert not grown, f"folder-level import loops: {grown}"


def test_the_folder_loop_check_finds_a_loop_of_two_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself, on a made-up tree: a.x imports b.y and b.y imports a.z is one loop."""
    fake = {
        "harness.a": Path("harness/a/__init__.py"), "harness.a.x": Path("harness/a/x.py"),
        "harness.a.z": Path("harness/a/z.py"), "harness.b": Path("harness/b/__init__.py"),
        "harness.b.y": Path("harness/b/y.py"),
    }  # fmt: skip
    edges = {"harness.a.x": {"harness.b.y"}, "harness.b.y": {"harness.a.z"}}
    monkeypatch.setattr(f"{__name__}.modules", lambda: fake)
    monkeypatch.setattr(f"{__name__}.harness_imports", lambda name: edges.get(name, set()))
    assert folder_loops() == [frozenset({"harness.a", "harness.b"})]


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


def map_part(part: str) -> str:
    """The map of the tree (docs/development/architecture.md): its rooms (everything before
    "## Layout") or its layout (the tree drawn from "## Layout" on)."""
    text = MAP.read_text()
    cut = text.index("\n## Layout")
    return text[:cut] if part == "rooms" else text[cut:]


@pytest.mark.parametrize("part", ["rooms", "layout"])
def test_every_package_folder_and_mode_is_on_the_map(part: str) -> None:
    text = map_part(part)
    missing = [f for f in folders_and_modes() if not re.search(rf"\b{re.escape(f)}/", text)]
    assert not missing, f"{MAP.relative_to(ROOT)} ({part}) does not show {missing}"


def test_every_module_is_named_on_the_map() -> None:
    """Per module: a new module without a word on the map fails here, by name."""
    text = MAP.read_text()
    missing = sorted(
        name
        for name, path in modules().items()
        if path.stem not in ("__init__", "__main__")
        and not re.search(rf"\b{re.escape(path.stem)}\b", text)
    )
    assert not missing, f"{MAP.relative_to(ROOT)} does not name {missing}"


# ---- Every module has its tests --------------------------------------------------------------
# tests/ mirrors harness/: harness/a/b.py ↔ tests/a/test_b.py; a package whose __init__.py holds
# code, harness/a/b/__init__.py ↔ tests/a/b/test_b.py. A module tested elsewhere has a line here
# naming the test files that exercise it: each must exist and import or name the module.
COVERED_BY: dict[str, tuple[str, ...]] = {
    "harness.plan": ("tests/test_plan.py", "tests/test_plan_layouts.py"),
    "harness.plan.measured": ("tests/hostile/test_measured_fit_hostile.py",),
    "harness.plan.seconds": ("tests/test_plan_layouts.py",),
    "harness.modes.serving.price": ("tests/modes/serving/test_price.py",),
    "harness.modes.serving.price.common": ("tests/modes/serving/price/test_bands.py",),
    "harness.projection.text": ("tests/projection/test_rent.py",),
    # price feeds: each schema read from its fixture, bad rows through the command
    "harness.prices.offer": ("tests/prices/test_build.py",),
    "harness.prices.read": ("tests/cli/test_tariffs.py",),
    "harness.prices.cards": ("tests/prices/test_feeds.py",),
    "harness.prices.feeds": ("tests/prices/test_feeds.py",),
    "harness.prices.feeds.gpuhunt_csv": ("tests/prices/test_feeds.py",),
    "harness.prices.feeds.gpuhunt_live": ("tests/prices/test_feeds.py",),
    "harness.prices.feeds.skypilot_csv": ("tests/prices/test_feeds.py",),
    "harness.projection.traffic_fit": ("tests/projection/test_rent.py",),
    # long-context items: every family, the entry and the task through the generators' tests
    "harness.tasks.longctx": ("tests/tasks/longctx/test_generators.py",),
    "harness.tasks.longctx.base": ("tests/tasks/longctx/test_generators.py",),
    "harness.tasks.longctx.entry": ("tests/tasks/longctx/test_generators.py",),
    "harness.tasks.longctx_task": ("tests/tasks/longctx/test_generators.py",),
    "harness.tasks.longctx.single_needle": ("tests/tasks/longctx/test_generators.py",),
    "harness.tasks.longctx.multi_key": ("tests/tasks/longctx/test_generators.py",),
    "harness.tasks.longctx.variable_tracking": ("tests/tasks/longctx/test_generators.py",),
    "harness.tasks.longctx.frequent_words": ("tests/tasks/longctx/test_generators.py",),
    "harness.tasks.longctx.engine": ("tests/tasks/kinds/test_longctx.py",),
    "harness.modes.serving.columns": ("tests/results/test_columns.py",),
    "harness.modes.training.columns": ("tests/results/test_columns.py",),
    "harness.backends.base": (
        "tests/backends/test_transformers_backend.py", "tests/backends/test_vllm_backend.py",
        "tests/backends/test_vllm_adapter.py",
    ),
    "harness.backends.transformers.backend": (
        "tests/backends/test_transformers_backend.py",
        "tests/backends/test_transformers_adapter.py",
        "tests/backends/test_transformers_quality_speed.py",
    ),
    "harness.backends.vllm.args": (
        "tests/backends/test_vllm_layout_args.py", "tests/backends/test_vllm_backend.py",
        "tests/backends/test_vllm_speculative.py", "tests/backends/test_vllm_tensor_parallel.py",
    ),
    "harness.backends.vllm.backend": (
        "tests/backends/test_vllm_backend.py", "tests/backends/test_vllm_tensor_parallel.py",
    ),
    "harness.backends.vllm.dialect": ("tests/backends/test_vllm_backend.py",),
    "harness.backends.vllm.card": ("tests/spec/test_engines.py",),
    "harness.backends.vllm.options": ("tests/spec/test_engine_options.py",),
    "harness.backends.transformers.card": ("tests/spec/test_engines.py",),
    "harness.backends.transformers.options": ("tests/spec/test_engine_options.py",),
    "harness.backends.llamacpp.card": ("tests/spec/test_engines.py",),
    "harness.backends.llamacpp.options": ("tests/spec/test_engine_options.py",),
    "harness.backends.llamacpp.backend": ("tests/backends/test_llamacpp.py",),
    "harness.backends.llamacpp.gguf": ("tests/backends/test_llamacpp.py",),
    "harness.backends.llamacpp.server": ("tests/backends/test_llamacpp.py",),
    "harness.backends.sglang.server": ("tests/backends/test_sglang_args.py",),
    "harness.backends.sglang.card": ("tests/spec/test_engines.py",),
    "harness.backends.sglang.options": ("tests/spec/test_engine_options.py",),
    "harness.backends.sglang.args": ("tests/backends/test_sglang_args.py",),
    "harness.backends.sglang.backend": ("tests/backends/test_sglang_args.py",),
    "harness.backends.vllm.memory": ("tests/backends/test_vllm_backend.py",),
    "harness.backends.vllm.parse": ("tests/backends/test_vllm_backend.py",),
    "harness.cli.main": (
        "tests/cli/test_cli.py", "tests/cli/test_bench.py", "tests/cli/test_pull.py",
        "tests/cli/test_progress_log.py", "tests/cli/test_tasks_cli.py",
        "tests/cli/test_training_cli.py", "tests/cli/test_site_cli.py",
        "tests/hostile/test_hostile_inputs.py", "tests/hostile/test_run_lock.py",
    ),
    "harness.cli.results": (
        "tests/results/test_aggregate.py", "tests/results/test_compare.py",
        "tests/results/test_publish.py", "tests/results/test_columns.py",
    ),
    "harness.files": ("tests/hostile/test_safe_reader.py",),
    "harness.modes.offline.device.run": ("tests/run/test_worker.py",),
    "harness.modes.serving.plan": ("tests/modes/serving/test_search.py",),
    "harness.modes.training.device.trainer": (
        "tests/modes/training/device/test_run.py", "tests/modes/training/device/test_checks.py",
        "tests/modes/training/test_data.py",
    ),
    "harness.results.admission": (
        "tests/hostile/test_row_admission.py", "tests/hostile/test_row_parts_whole.py",
    ),
    "harness.results.effects": ("tests/results/test_aggregate.py",),
    "harness.results.energy": ("tests/results/test_energy_cost.py",),
    "harness.results.frame": (
        "tests/results/test_aggregate.py", "tests/results/test_frame_columns.py",
        "tests/results/test_speculation.py", "tests/hostile/test_row_admission.py",
        "tests/hostile/test_schema_version.py",
    ),
    "harness.results.pareto": ("tests/results/test_aggregate.py",),
    "harness.results.pricing": (
        "tests/results/test_pricing_layouts.py", "tests/modes/serving/test_price.py",
    ),
    "harness.results.publish.files": (
        "tests/results/test_publish.py", "tests/hostile/test_hostile_inputs.py",
        "tests/hostile/test_operational_faults.py",
    ),
    "harness.results.publish.format": (
        "tests/results/test_markdown_escape.py", "tests/results/test_columns.py",
    ),
    "harness.results.publish.headline": (
        "tests/results/test_publish.py", "tests/results/test_columns.py",
    ),
    "harness.results.publish.html": (
        "tests/results/test_memory_chart.py", "tests/results/test_verdicts_report.py",
    ),
    "harness.results.publish.markdown": (
        "tests/results/test_markdown_escape.py", "tests/results/test_verdicts_report.py",
    ),
    "harness.results.publish.svg": (
        "tests/results/test_svg_ranking.py", "tests/results/test_markdown_escape.py",
    ),
    "harness.results.publish.verdicts": ("tests/results/test_verdicts_report.py",),
    "harness.row.tasks": (
        "tests/hostile/test_row_parts_whole.py", "tests/results/test_gate_tasks.py",
    ),
    "harness.row": (
        "tests/hostile/test_row_admission.py", "tests/hostile/test_row_parts_whole.py",
        "tests/hostile/test_schema_version.py", "tests/run/test_worker.py",
    ),
    "harness.run.contracts": (
        "tests/run/test_worker.py", "tests/run/test_host.py", "tests/run/test_launchers.py",
        "tests/run/test_device.py",
    ),
    "harness.run.forking": (
        "tests/run/test_host.py", "tests/run/test_launchers.py",
        "tests/hostile/test_lock_and_node.py",
    ),
    "harness.run.launchers.actor": ("tests/run/test_launchers.py", "tests/run/test_lost_nodes.py"),
    "harness.run.launchers.base": ("tests/run/test_launchers.py",),
    "harness.run.launchers.forked": ("tests/run/test_launchers.py",),
    "harness.run.launchers.inline": ("tests/run/test_launchers.py",),
    "harness.run.store": (
        "tests/run/test_worker.py", "tests/run/test_host.py", "tests/run/test_driver.py",
        "tests/hostile/test_hostile_inputs.py", "tests/hostile/test_schema_version.py",
        "tests/results/test_regressions.py",
    ),
    "harness.run.sweep": (
        "tests/run/test_driver.py", "tests/run/test_history.py", "tests/run/test_session.py",
        "tests/hostile/test_point_content.py",
    ),
    "harness.spec.capabilities": (
        "tests/spec/test_compat.py", "tests/spec/test_layouts.py", "tests/test_plan_layouts.py",
    ),
    "harness.spec.catalog": (
        "tests/spec/test_models.py", "tests/test_plan.py", "tests/hostile/test_config_json.py",
    ),
    "harness.spec.labels": (
        "tests/spec/test_layouts.py", "tests/results/test_columns.py",
        "tests/hostile/test_revisions.py",
    ),
}  # fmt: skip
TESTS = ROOT / "tests"
# Test files that read the package's source (not its behaviour): they cover nothing.
NOT_COVERAGE = ("tests/test_architecture.py",)


def has_code(path: Path) -> bool:
    """Whether a module holds more than a docstring, imports and dunder names (`__all__`)."""

    def bare(node: ast.stmt) -> bool:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return True
        if isinstance(node, ast.Import | ast.ImportFrom):
            return True
        return isinstance(node, ast.Assign) and all(
            isinstance(t, ast.Name) and t.id.startswith("__") for t in node.targets
        )

    return not all(bare(node) for node in ast.parse(path.read_text(), str(path)).body)


@cache
def modules_to_test() -> dict[str, Path]:
    return {name: path for name, path in modules().items() if has_code(path)}


def mirror_of(path: Path) -> Path:
    """The test module a package module would have by the mirror rule."""
    rel = path.relative_to(PACKAGE)
    if path.name == "__init__.py":
        return TESTS / rel.parent / f"test_{rel.parent.name}.py"
    return TESTS / rel.parent / f"test_{path.stem}.py"


@cache
def mentioned(test: Path) -> frozenset[str]:
    """The package modules a test file imports or names: `harness.a.b`, `harness.a.b.attr`,
    `"harness.a.b:attr"`, `from harness.a import b` and `harness/a/b.py` each name harness.a.b
    (the longest dotted prefix that is a module)."""
    text = test.read_text()
    dotted = set(re.findall(r"\bharness(?:\.\w+)+", text))
    dotted |= {
        m.removesuffix(".py").replace("/", ".") for m in re.findall(r"\bharness(?:/\w+)+\.py", text)
    }
    for node in ast.walk(ast.parse(text, str(test))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            dotted |= {f"{node.module}.{alias.name}" for alias in node.names}
    found = set()
    for name in dotted:
        parts = name.split(".")
        prefixes = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
        found.add(next((p for p in prefixes if p in modules()), name))
        found |= {reexports(".".join(parts[:-1])).get(parts[-1], "")} - {""}
    return frozenset(found)


@cache
def reexports(package: str) -> dict[str, str]:
    """The names a package's __init__.py imports from its own modules: name → module (a test
    that imports `harness.results.publish.headline_table` names `…publish.headline`)."""
    path = modules().get(package)
    if path is None or path.name != "__init__.py":
        return {}
    return {
        alias.asname or alias.name: node.module
        for node in ast.parse(path.read_text(), str(path)).body
        if isinstance(node, ast.ImportFrom) and node.module and within(node.module, package)
        for alias in node.names
    }


def test_every_module_has_its_test_module_or_a_covered_by_line() -> None:
    missing = [
        f"  {name} → {mirror_of(path).relative_to(ROOT)}"
        for name, path in modules_to_test().items()
        if not mirror_of(path).exists() and name not in COVERED_BY
    ]
    assert not missing, (
        f"{len(missing)} modules have no tests: write the test module named, or add a line "
        '"harness.x.y": ("tests/…/test_z.py", …) to COVERED_BY in tests/test_architecture.py '
        "naming test files that import the module and exercise it:\n" + "\n".join(missing)
    )


@pytest.mark.parametrize("name", sorted(COVERED_BY))
def test_each_covered_by_line_names_tests_that_exercise_its_module(name: str) -> None:
    path = modules_to_test().get(name)
    assert path is not None, f"COVERED_BY names {name}, which is no module with code: remove it"
    assert not mirror_of(path).exists(), (
        f"{name} has its mirror {mirror_of(path).relative_to(ROOT)}: remove its COVERED_BY line"
    )
    for test in COVERED_BY[name]:
        assert test not in NOT_COVERAGE, f"COVERED_BY[{name!r}]: {test} reads source, not behaviour"
        assert (ROOT / test).is_file(), f"COVERED_BY[{name!r}]: {test} does not exist"
        assert Path(test).name.startswith("test_"), f"COVERED_BY[{name!r}]: {test} is no test"
        assert name in mentioned(ROOT / test), (
            f"COVERED_BY[{name!r}]: {test} neither imports nor names {name}"
        )
