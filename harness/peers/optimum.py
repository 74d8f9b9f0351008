"""optimum-benchmark's side of `make side-by-side`: its venv, our model made readable to it, and
one timed run of its grid (`harness.peers.optimum_grid`, copied into $OB_HOME and run there).

optimum-benchmark needs its own venv (transformers < 5, bitsandbytes 0.48.2): it is built under
``$OB_HOME`` (default ``~/.cache/harness/optimum-benchmark``) when missing, never in the repo;
exit code 2 with a message when it cannot be built. The model is copied to ``$OB_HOME`` and its
config adapted to transformers 4.x when needed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, NoReturn

from harness.peers.machine import child_env, load1, log, timed
from harness.peers.machine import fail as _fail
from harness.spec.models import PACKAGE_DATA

MODEL_DIR = PACKAGE_DATA / "tiny-llama"
OB_HOME = Path(os.environ.get("OB_HOME") or Path.home() / ".cache/harness/optimum-benchmark")
OB_PINS = [
    "torch==2.13.0",
    "optimum-benchmark[bitsandbytes]==0.6.0",
    "transformers<5",
    "huggingface-hub<1.0",
    "bitsandbytes==0.48.2",
]
GRID_RUNNER = Path(__file__).with_name("optimum_grid.py")


def fail(message: str, logfile: Path | None = None, tail: int = 3000) -> NoReturn:
    _fail("side-by-side", message, logfile, tail)


def base_python() -> str:
    """The interpreter the harness venv was made from (a venv is not made from a venv)."""
    return getattr(sys, "_base_executable", None) or shutil.which("python3") or sys.executable


def ob_python() -> Path:
    return OB_HOME / "venv" / "bin" / "python"


def ensure_ob_venv() -> None:
    """Build $OB_HOME/venv with the pins of the peer recipe, once; exit 2 if that fails."""
    stamp = OB_HOME / "venv" / ".side-by-side-installed"
    if stamp.is_file() and ob_python().is_file():
        return
    OB_HOME.mkdir(parents=True, exist_ok=True)
    constraints = OB_HOME / "constraints.txt"
    constraints.write_text("torch==2.13.0\n")
    log(f"building the optimum-benchmark venv in {OB_HOME / 'venv'} (once; needs a registry)")
    started = time.perf_counter()
    steps = [
        [base_python(), "-m", "venv", str(OB_HOME / "venv")],
        [str(ob_python()), "-m", "pip", "install", "-q", "-c", str(constraints), *OB_PINS],
    ]
    pip_log = OB_HOME / "pip-install.log"
    with pip_log.open("w") as out:
        for argv in steps:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
            if done.returncode != 0:
                tail = pip_log.read_text(errors="replace").strip().splitlines()[-5:]
                fail(
                    "cannot build the optimum-benchmark venv "
                    f"({' '.join(argv[:4])} … exited {done.returncode}; no registry access?). "
                    f"Log: {pip_log}. Last lines: " + " | ".join(tail)
                )
    check = subprocess.run(
        [str(ob_python()), "-c", "import optimum_benchmark, transformers, bitsandbytes"],
        capture_output=True,
        text=True,
        env=child_env(),
        check=False,
    )
    if check.returncode != 0:
        fail(f"the optimum-benchmark venv does not import: {check.stderr.strip()[-500:]}")
    stamp.write_text(" ".join(OB_PINS) + "\n")
    log(f"optimum-benchmark venv ready in {time.perf_counter() - started:.0f} s")


def transformers4_config(config: dict[str, Any]) -> dict[str, Any]:
    """A transformers 5 config.json readable by transformers 4.57: transformers 5 writes `dtype`
    and nests RoPE in `rope_parameters`; 4.57 reads `torch_dtype`, `rope_theta`, `rope_scaling`."""
    config = dict(config)
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" not in config:
        config["rope_theta"] = rope.get("rope_theta", 10000.0)
        if rope.get("rope_type", "default") == "default":
            config.setdefault("rope_scaling", None)
        else:
            config.setdefault("rope_scaling", rope)
    if "dtype" in config and "torch_dtype" not in config:
        config["torch_dtype"] = config["dtype"]
    return config


_PROBE = """
import torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
path = {path!r}
cfg = AutoConfig.from_pretrained(path)
m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
AutoTokenizer.from_pretrained(path)
out = m.generate(torch.tensor([[1, 5, 6, 7]]), max_new_tokens=2, min_new_tokens=2)
print(transformers.__version__, type(m).__name__, cfg.tie_word_embeddings,
      cfg.intermediate_size, tuple(out.shape))
"""


def ob_model() -> Path:
    """Our tiny model, copied to $OB_HOME and its config made readable by transformers 4.x."""
    if not (MODEL_DIR / "config.json").is_file() or not (MODEL_DIR / "model.safetensors").is_file():
        fail(f"{MODEL_DIR} has no config.json / model.safetensors (train it first)")
    dest = OB_HOME / "tiny-llama-harness"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(MODEL_DIR, dest)
    config_path = dest / "config.json"
    config = transformers4_config(json.loads(config_path.read_text()))
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    probe = textwrap.dedent(_PROBE.format(path=str(dest)))
    done = subprocess.run(
        [str(ob_python()), "-c", probe], capture_output=True, text=True, env=child_env()
    )
    if done.returncode != 0:
        fail(f"the model does not load in the optimum-benchmark venv: {done.stderr[-800:]}")
    log(f"model for optimum-benchmark: {dest} (transformers, class, tied, inter, out: "
        f"{done.stdout.strip()})")  # fmt: skip
    return dest


def run_ob(
    launcher: str, model: Path, work: Path, tag: str, grid: dict[str, Any]
) -> dict[str, Any]:
    """One timed run of the grid with `launcher` (process | inline); its figures: Σ over the points
    of `generate.latency.total` (the measured work), load time, loop and import time, the load
    average around it and the CPU others used meanwhile."""
    runner = OB_HOME / "side_by_side_ob_grid.py"
    shutil.copyfile(GRID_RUNNER, runner)
    out = work / tag
    argv = [str(ob_python()), str(runner), "--launcher", launcher, "--out", str(out)]
    argv += ["--model", str(model), "--grid", json.dumps(grid)]
    la0 = load1()
    wall, code, foreign = timed(argv, work / f"{tag}.log", tag)
    la1 = load1()
    summary_path = out / "summary.json"
    if code != 0 or not summary_path.is_file():
        logfile = work / f"{tag}.log"
        fail(f"optimum-benchmark ({launcher}) exited {code}; log {logfile}:", logfile, 1500)
    summary = json.loads(summary_path.read_text())
    ok = [p for p in summary["points"] if p["ok"]]
    for p in summary["points"]:
        if not p["ok"]:
            log(f"  ! {tag} {p['name']}: {p['error'][:300]}")
    return {
        "tool": f"ob-{launcher}",
        "tag": tag,
        "wall_s": wall,
        "points_ok": len(ok),
        "points": len(summary["points"]),
        "measured_s": sum(p["generate"]["total"] for p in ok),
        "load_s": sum(p["load_model"]["total"] for p in ok if p["load_model"]),
        "loop_s": summary["grid_loop_s"],
        "import_s": summary["import_s"],
        "load_before": la0,
        "load_after": la1,
        "foreign_cpu_s": foreign,
        "decode": {p["name"]: p.get("decode_tok_s") for p in ok},
    }
