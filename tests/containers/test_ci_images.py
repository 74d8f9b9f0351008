""".ci/images.sh where it cannot run (one line, exit 0), and the run checker it relies on
(.ci/check_run.py): it must pass a complete run and fail every way a run can go wrong."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness import corpus
from harness.row import Provenance
from harness.run import store, sweep
from harness.run.contracts import point_row

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "images.sh"
CLUSTER = ROOT / "scenarios" / "ci" / "cluster.yaml"
MEASURE = ROOT / "scenarios" / "ci" / "measure.yaml"
IMAGE = "harness-ci:cpu"


def check_run() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_run", ROOT / ".ci" / "check_run.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- images.sh


def run_script(
    tmp_path: Path, tools: dict[str, str], **env: str
) -> subprocess.CompletedProcess[str]:
    """images.sh on a PATH holding only `tools` (name: script body, or "" for the real one)."""
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, body in tools.items():
        if body:
            (shims / name).write_text(f"#!/bin/sh\n{body}\n")
            (shims / name).chmod(0o755)
        else:
            real = shutil.which(name)
            assert real, name
            (shims / name).symlink_to(real)
    return subprocess.run(
        [shutil.which("bash") or "bash", str(SCRIPT)],
        env={"PATH": str(shims), **env}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_ci_run_calls_the_image_script_right_after_the_tests() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert lines[lines.index("make test") + 1] == "bash .ci/images.sh"


def test_the_script_parses() -> None:
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_not_root_skips_with_one_line(tmp_path: Path) -> None:
    done = run_script(tmp_path, {"dirname": "", "id": "echo 1000", "apt-get": "exit 0"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        "images: skipped: not root (installing and starting a Docker engine needs root)"
    ]


def test_no_apt_skips_with_one_line(tmp_path: Path) -> None:
    done = run_script(tmp_path, {"dirname": "", "id": "echo 0"})
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.strip()
        == "images: skipped: no apt-get (the engine comes from Debian's docker.io)"
    )


def test_it_can_be_turned_off(tmp_path: Path) -> None:
    done = run_script(tmp_path, {"dirname": "", "id": "echo 0", "apt-get": "exit 0"},
                      HARNESS_CI_IMAGES="0")  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (0, "images: skipped: HARNESS_CI_IMAGES=0")


def test_ci_run_builds_the_gpu_venv_after_the_images() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert lines[lines.index("bash .ci/images.sh") + 1] == "bash .ci/gpu-venv.sh"


def test_gpu_venv_skips_with_one_line_where_the_disk_is_short(tmp_path: Path) -> None:
    df = "echo 'Filesystem 1024-blocks Used Available Capacity Mounted'; echo 'x 1 1 8388608 1% /'"
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, body in {"df": df}.items():
        (shims / name).write_text(f"#!/bin/sh\n{body}\n")
        (shims / name).chmod(0o755)
    for name in ("dirname", "awk"):
        (shims / name).symlink_to(shutil.which(name) or name)
    done = subprocess.run(
        [shutil.which("bash") or "bash", str(ROOT / ".ci" / "gpu-venv.sh")],
        env={"PATH": str(shims)}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "gpu-venv: skipped: 8 GB free here; the CUDA venv needs 20 GB (GB = 2^30 bytes)"
    )


# --------------------------------------------------------------------------- check_run.py


def write_run(
    run_dir: Path,
    scenario: Path,
    status: dict[int, str] | None = None,
    failures: list[dict[str, Any]] | None = None,
    drop: int | None = None,
    image: str = IMAGE,
) -> None:
    """A finished run folder as the cluster run leaves it: point i gets status[i] (default ok),
    even points from the head and odd ones from the worker; `drop` leaves point `drop` unwritten."""
    plan = sweep.prepare(scenario, run_dir)
    sweep.start_manifest(run_dir, scenario, plan, mode="ray")
    h = corpus.corpus_hash()
    points = [p for w in plan.work for p in w.points]
    for i, point in enumerate(points):
        if i == drop:
            continue
        where = Provenance(
            hostname="worker" if i % 2 else "head", git_sha="abc", container_image=image
        )
        store.write_row(run_dir, point_row(point, run="r", corpus_hash=h,
                                           status=(status or {}).get(i, "ok"),  # type: ignore[arg-type]
                                           provenance=where))  # fmt: skip
    for row in sweep.skipped_rows(plan):
        store.write_row(run_dir, row)
    sweep.finish_manifest(run_dir, wall_s=1.0, failures=failures or [])


LOST = [{"group": "g", "node_id": "n", "error": "ActorDiedError: ...", "points_left": 3}]


def test_a_complete_run_passes(tmp_path: Path) -> None:
    write_run(tmp_path / "m", MEASURE)
    line = check_run().check(tmp_path / "m", MEASURE, all_ok=True, node_loss=False, image=IMAGE)
    assert line.startswith("4/4 points")  # 2 measured, 2 skipped by the scenario
    write_run(tmp_path / "c", CLUSTER, status={3: "node_lost"}, failures=LOST)
    line = check_run().check(tmp_path / "c", CLUSTER, all_ok=False, node_loss=True, image=IMAGE)
    assert "'node_lost': 1" in line and "1 failure(s)" in line


@pytest.mark.parametrize(
    ("case", "kwargs", "expect"),
    [
        ("a lost point", {"drop": 2, "failures": LOST}, "lost"),
        ("an error row", {"status": {1: "error"}, "failures": LOST}, "rows not in"),
        ("no node loss recorded", {"failures": []}, "records no failure"),
        ("another image", {"image": "harness:cpu", "failures": LOST}, "container_image"),
    ],
)
def test_every_way_a_cluster_run_goes_wrong_fails(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    kwargs: dict[str, Any],
    expect: str,
) -> None:
    write_run(tmp_path / "c", CLUSTER, **kwargs)
    with pytest.raises(SystemExit) as stop:
        check_run().check(tmp_path / "c", CLUSTER, all_ok=False, node_loss=True, image=IMAGE)
    assert stop.value.code == 1, case
    assert expect in capsys.readouterr().err, case


def test_a_node_lost_row_fails_the_measure_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "m", MEASURE, status={0: "node_lost"})
    with pytest.raises(SystemExit):
        check_run().check(tmp_path / "m", MEASURE, all_ok=True, node_loss=False, image=IMAGE)
    assert "rows not in ['ok']" in capsys.readouterr().err


def test_an_unfinished_run_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "m", MEASURE)
    manifest = store.read_manifest(tmp_path / "m")
    del manifest["runs"][-1]["ended"]
    store.write_manifest(tmp_path / "m", manifest)
    with pytest.raises(SystemExit):
        check_run().check(tmp_path / "m", MEASURE, all_ok=True, node_loss=False, image=IMAGE)
    assert "never ended" in capsys.readouterr().err
