"""The harness's side: the scenario the comparison reads, its model, and one `harness measure`
of one point in its own subprocess (in-process engine, no Ray), its row and the engine arguments
vLLM logged for the harness's engine."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from harness.peers import machine
from harness.peers.machine import (
    CORES,
    REPO,
    child_env,
    foreign_share,
    load1,
    machine_busy_s,
    own_cpu_s,
    run_rows,
)
from harness.peers.side_by_side_vllm.parse import parse_engine_args
from harness.spec.models import PACKAGE_DATA


def fail(message: str, logfile: Path | None = None) -> NoReturn:
    machine.fail("side-by-side-vllm", message, logfile)


def read_scenario(path: Path) -> dict[str, Any]:
    """The scenario as a dict; it must name one model on vLLM, one quantization, KV cache auto."""
    import yaml

    data: dict[str, Any] = yaml.safe_load(path.read_text())
    if data.get("backend") != ["vllm"] or len(data.get("quantization", [])) != 1:
        raise SystemExit(f"{path}: needs backend [vllm] and one quantization")
    if data.get("kv_cache_dtype", ["auto"]) != ["auto"] or len(data["models"]) != 1:
        raise SystemExit(f"{path}: needs one model and kv_cache_dtype [auto]")
    return data


def model_dir(model_id: str) -> Path:
    """The model's directory: shipped (harness/data/<id>), a path, or a path under the repo."""
    for candidate in (PACKAGE_DATA / model_id, Path(model_id), REPO / model_id):
        if (candidate / "config.json").is_file():
            return candidate.resolve()
    raise SystemExit(f"model {model_id!r}: neither harness/data/{model_id} nor a directory")


def run_harness(scenario: Path, out: Path) -> dict[str, Any]:
    """`harness measure` into a fresh folder (a used one would be resumed: its rows kept); its
    rows, the engine arguments from its log, the load average around it and the share of the
    machine others used meanwhile."""
    if out.exists():
        shutil.rmtree(out)
    argv = [str(Path(sys.executable).parent / "harness"), "measure", str(scenario)]
    argv += ["--out", str(out)]
    logfile = out.with_suffix(".log")
    la0 = load1()
    busy0, own0, started = machine_busy_s(), own_cpu_s(), time.perf_counter()
    with logfile.open("w") as log_out:
        code = subprocess.run(
            argv, stdout=log_out, stderr=subprocess.STDOUT, env=child_env()
        ).returncode
    wall = time.perf_counter() - started
    busy, own = machine_busy_s() - busy0, own_cpu_s() - own0
    if code != 0:
        fail(f"harness measure exited {code} ({' '.join(argv)})", logfile)
    rows = run_rows(out)
    bad = [r for r in rows if r["status"] != "ok"]
    if bad or not rows:
        fail(f"harness rows not ok: {[(r['batch'], r['context'], r['error']) for r in bad]}")
    engine_args = parse_engine_args(logfile.read_text(errors="replace"))
    if engine_args is None:
        fail("the harness's log has no engine arguments ('non-default args: {...}')", logfile)
    return {
        "wall_s": wall,
        "rows": rows,
        "engine_args": engine_args,
        "load_before": la0,
        "load_after": load1(),
        "foreign_share": foreign_share(busy, own, wall, CORES),
    }
