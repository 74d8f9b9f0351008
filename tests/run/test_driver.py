"""The Ray driver on a real multi-node Ray cluster on one machine (ray.cluster_utils.Cluster).

Nodes advertise vendors as Ray resources and labels, exactly as `harness node start` does; the
tiny CPU model runs underneath (GPU targets are simulated on the CPU, and the rows' provenance
says so by naming the CPU that ran them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import corpus
from harness.run import sweep
from harness.run.store import read_rows
from harness.spec.scenario import parse

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny-sweep.yaml"
FAST_HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}


@pytest.fixture(autouse=True)
def quiet_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "_system_config": FAST_HEALTH},
    )
    yield c
    ray.shutdown()
    c.shutdown()


def write_scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    parse(text)  # valid before any test relies on it
    return path


def expected_keys(scenario: Path, run_dir: Path) -> set[str]:
    plan = sweep.prepare(scenario, run_dir)
    h = corpus.corpus_hash()
    return {p.key(h) for w in plan.work for p in w.points} | {p.key(h) for p, _ in plan.skipped}


def run_in_process(scenario: Path, run_dir: Path, address: str, **kw: Any) -> None:
    from harness.run.session import run_sweep

    run_sweep(scenario, address, run_dir, True, None, **kw)


def test_groups_are_routed_to_the_node_of_their_vendor(cluster: Cluster, tmp_path: Path) -> None:
    nvidia = cluster.add_node(
        num_cpus=1, resources={"accel:nvidia": 1}, labels={"vendor": "nvidia"}
    )
    amd = cluster.add_node(num_cpus=1, resources={"accel:amd": 1}, labels={"vendor": "amd"})
    cluster.wait_for_nodes()
    text = FIXTURE.read_text().replace("targets: [cpu]", "targets: [cuda, rocm]")
    text = text.replace("batch: [1, 2]", "batch: [1]").replace("[none, bnb-int8]", "[none]")
    scenario = write_scenario(tmp_path, text)
    run_dir = tmp_path / "run"
    run_in_process(scenario, run_dir, cluster.address, simulate_on_cpu=True)
    rows, bad = read_rows(run_dir)
    assert not bad
    assert rows and all(r.status == "ok" for r in rows), [r.error for r in rows]
    where = {"cuda": nvidia.node_id, "rocm": amd.node_id}
    for row in rows:
        assert row.provenance.node_id == where[row.target], row.target
    assert {r.target for r in rows} == {"cuda", "rocm"}


def test_a_worker_node_removed_mid_sweep_loses_no_point(cluster: Cluster, tmp_path: Path) -> None:
    nodes = [
        cluster.add_node(num_cpus=1, resources={"accel:cpu": 1}, labels={"vendor": "cpu"})
        for _ in range(2)
    ]
    cluster.wait_for_nodes()
    text = FIXTURE.read_text().replace("repeats: 2", "repeats: 2\nmin_duration_s: 1.0")
    scenario = write_scenario(tmp_path, text)
    run_dir = tmp_path / "run"
    removed: list[str] = []

    def remove_the_node_that_measures() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not removed:
            rows, _ = read_rows(run_dir)
            ok = [r for r in rows if r.status == "ok" and r.provenance.node_id]
            if ok:
                victim = next(n for n in nodes if n.node_id == ok[0].provenance.node_id)
                cluster.remove_node(victim, allow_graceful=False)
                removed.append(victim.node_id)
            time.sleep(0.2)

    killer = threading.Thread(target=remove_the_node_that_measures, daemon=True)
    killer.start()
    run_in_process(scenario, run_dir, cluster.address)
    killer.join(timeout=5)
    assert removed, "the sweep ended before a node could be removed"
    rows, bad = read_rows(run_dir)
    assert not bad
    keys = expected_keys(scenario, run_dir)
    assert {r.key for r in rows} == keys  # no point silently gone
    assert all(r.status in {"ok", "node_lost"} for r in rows)
    survivors = {r.provenance.node_id for r in rows if r.status == "ok"}
    assert survivors - set(removed)  # the rest was measured on the node that stayed
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["runs"][-1]["failures"], "the lost node is recorded"


def test_a_driver_killed_mid_sweep_resumes_with_every_point_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.add_node(num_cpus=1, resources={"accel:cpu": 1}, labels={"vendor": "cpu"})
    cluster.wait_for_nodes()
    text = FIXTURE.read_text().replace("repeats: 2", "repeats: 2\nmin_duration_s: 0.5")
    scenario = write_scenario(tmp_path, text)
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "harness.cli", "run", str(scenario), "--address",
            cluster.address, "--out", str(run_dir)]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    first = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        rows, _ = read_rows(run_dir)
        if any(r.status == "ok" for r in rows):
            break
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    before = {r.key: (run_dir / "points" / f"{r.key}.json").stat().st_mtime_ns
              for r in read_rows(run_dir)[0] if r.status == "ok"}  # fmt: skip
    assert before, "the driver was killed before any point was measured"
    keys = expected_keys(scenario, run_dir)
    assert len(before) < len(keys), "the driver was killed after the sweep ended"
    subprocess.run(argv, env=env, check=True, timeout=600, capture_output=True)
    rows, bad = read_rows(run_dir)
    assert not bad
    files = sorted((run_dir / "points").iterdir())
    assert [f.name for f in files] == sorted(f"{k}.json" for k in keys)  # each exactly once
    assert all(r.status == "ok" for r in rows)
    for key, mtime in before.items():  # measured points were not measured again
        assert (run_dir / "points" / f"{key}.json").stat().st_mtime_ns == mtime
