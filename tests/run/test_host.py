"""The node host (harness.run.host): a group in a child forked from a pre-imported forkserver.

The first tests drive `fork_group` directly on a forkserver started in this process (no Ray):
the child's hello, its rows (pickled by the child, relayed as bytes), a killed child, a failing
group, a caller gone. Then the
host server, a process of its own (no Ray): a group through its socket, a wrong key refused, and
the server with everything it forked gone when its parent dies. The last ones run real Ray with
the real tiny model: the memory figures of the forked path against the fresh path, a child
killed mid-group ending its group as a lost actor does, and a server that cannot be reached
sending the group to a fresh actor.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from harness import corpus
from harness.errors import UserInputError
from harness.row import ResultRow
from harness.run import forking, host, sweep
from harness.run.contracts import WorkContext
from harness.run.store import read_rows
from harness.run.worker import iter_group, measure_group
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Point
from tests import factories as F

QUALITY = QualitySettings(window_tokens=64, max_windows=2, arc_items=2, bootstrap_samples=200)
SCENARIO = """name: host-{name}
models: [tiny-llama]
backend: [transformers]
quantization: [none]
kv_cache_dtype: [auto]
batch: [1]
context: [{contexts}]
output_tokens: {output_tokens}
targets: [cpu]
repeats: 2
warmups: 1
quality: {{window_tokens: 64, max_windows: 2, arc_items: 2, bootstrap_samples: 200}}
"""


def context(tmp_path: Path) -> WorkContext:
    return F.work_context(tmp_path, QUALITY)


def point(**kw: Any) -> Point:
    return F.tiny_point(QUALITY, **{"batch": 1, "repeats": 1, "warmups": 0, **kw})


@pytest.fixture(scope="module")
def forkserver() -> Iterator[Any]:
    before = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    yield host.start_forkserver()
    if before is None:
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)


def request(tmp_path: Path, points: list[Point], node_id: str, caller_pid: int | None) -> Any:
    """The points' group through `iter_group`, as the driver and a group's task ask for it."""
    kwargs = dict(
        group=points[0].group, points=points, ctx=context(tmp_path), process="forkserver"
    )  # fmt: skip
    env = {**host.device_env(), "OMP_NUM_THREADS": "1"}
    payload = forking.group_payload(iter_group, kwargs)
    return host.Request(payload, env, {"node_id": node_id}, caller_pid)


def unpickled(stream: Iterator[Any]) -> Iterator[Any]:
    """What the driver sees of a child's messages: each item unpickled, a failure raised."""
    for message in stream:
        if isinstance(message, host.ChildFailed):
            host.raise_failure(message)
        assert not isinstance(message, bytes)
        yield pickle.loads(message.data) if isinstance(message, host.Pickled) else message


def in_child(
    forkserver: Any, tmp_path: Path, points: list[Point], caller_pid: int | None = None
) -> Iterator[Any]:
    """The points' group in a child of `forkserver`, as a node host runs it."""
    ask = request(tmp_path, points, "node-x", caller_pid)
    return unpickled(host.fork_group(forkserver, ask))


def test_each_group_gets_its_own_child_that_finds_torch_already_imported(
    forkserver: Any, tmp_path: Path
) -> None:
    """Two groups one after the other: two children (neither this process), each started with
    torch in sys.modules (the forkserver imported it: the second group pays no import), each
    row recorded as measured by a forked child, on the node it was told."""
    starts: list[host.ChildStart] = []
    for quantization in ("none", "bnb-int8"):
        items = list(in_child(forkserver, tmp_path, [point(quantization=quantization)]))
        first, *rest = items
        assert isinstance(first, host.ChildStart)
        starts.append(first)
        rows = [i for i in rest if isinstance(i, ResultRow)]
        assert len(rows) == 1 and rows[0].status == "ok", rows[0].error
        assert rows[0].provenance.process == "forkserver"
        assert rows[0].provenance.node_id == "node-x"
    assert all(s.preloaded and s.unsafe is None for s in starts)
    assert len({s.pid for s in starts} | {os.getpid()}) == 3
    assert not running(starts[0].pid)


def test_a_child_killed_mid_group_raises_child_died_naming_the_signal(
    forkserver: Any, tmp_path: Path
) -> None:
    stream = in_child(forkserver, tmp_path, [point(), point(context=32)])
    start = next(stream)
    assert isinstance(start, host.ChildStart)
    os.kill(start.pid, signal.SIGKILL)
    began = time.monotonic()
    with pytest.raises(host.ChildDied, match=r"killed by signal 9 \(SIGKILL\)"):
        list(stream)
    assert time.monotonic() - began < 10 * host.POLL_S  # no hang


def test_a_group_that_raises_in_the_child_raises_the_same_error_here(
    forkserver: Any, tmp_path: Path
) -> None:
    bad = point(model="/nonexistent/model-folder")
    with pytest.raises(UserInputError) as caught:
        list(in_child(forkserver, tmp_path, [bad]))
    assert any("in the group's child process" in note for note in caught.value.__notes__)


def test_a_child_whose_caller_is_gone_is_stopped(forkserver: Any, tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    stream = in_child(forkserver, tmp_path, [point()], caller_pid=gone.pid)
    with pytest.raises(host.ChildDied, match="is gone"):
        list(stream)


def test_a_child_dies_with_its_forkserver(forkserver: Any, tmp_path: Path) -> None:
    """The forkserver ends with its host (and the host with the driver): its children must not
    run on (PR_SET_PDEATHSIG). The next fork starts a new forkserver."""
    from multiprocessing import forkserver as server

    stream = in_child(forkserver, tmp_path, [point(), point(context=32)])
    start = next(stream)
    assert isinstance(start, host.ChildStart)
    os.kill(server._forkserver._forkserver_pid, signal.SIGKILL)  # type: ignore[attr-defined]
    with pytest.raises(host.ChildDied):
        list(stream)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and running(start.pid):
        time.sleep(0.1)
    assert not running(start.pid)
    server.ensure_running()  # what the next fork does


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def server() -> Iterator[host.HostServer]:
    with host.start_server() as started:
        yield started


def via_server(info: forking.ServerInfo, tmp_path: Path, points: list[Point]) -> list[Any]:
    ask = request(tmp_path, points, "node-y", os.getpid())
    return list(unpickled(host.run_group_via(info, ask)))


def test_the_host_server_runs_each_group_in_a_fresh_child_of_its_forkserver(
    server: host.HostServer, tmp_path: Path
) -> None:
    """Two groups through the server's socket: each a child of the server's forkserver (not
    the server, not this process), started with torch imported, gone once its group is done."""
    starts = []
    for quantization in ("none", "bnb-nf4"):
        first, *rest = via_server(server.info, tmp_path, [point(quantization=quantization)])
        assert isinstance(first, host.ChildStart) and first.preloaded and first.unsafe is None
        starts.append(first)
        (row,) = [i for i in rest if isinstance(i, ResultRow)]
        assert row.status == "ok" and row.provenance.process == "forkserver", row.error
        assert row.provenance.node_id == "node-y"
    (forkserver,) = [
        c
        for c in psutil.Process(server.process.pid).children()
        if "multiprocessing.forkserver" in " ".join(c.cmdline())
    ]  # fmt: skip (its other child is multiprocessing's resource tracker)
    pids = {s.pid for s in starts}
    assert len(pids) == 2 and not pids & {os.getpid(), server.process.pid, forkserver.pid}
    assert not any(running(pid) for pid in pids)


def test_a_caller_without_the_servers_key_is_refused_and_told_to_run_fresh(
    server: host.HostServer, tmp_path: Path
) -> None:
    wrong = forking.ServerInfo(server.info.address, b"not the key")
    (only,) = via_server(wrong, tmp_path, [point()])
    assert isinstance(only, forking.Fallback)
    assert "host server cannot be reached (AuthenticationError" in only.reason
    first, *_ = via_server(server.info, tmp_path, [point()])  # the server still serves
    assert isinstance(first, host.ChildStart)


def test_the_host_server_and_all_it_forked_end_when_its_parent_is_killed() -> None:
    """The parent (here a plain process; in a run the driver or a node's host actor) is
    SIGKILLed while the forkserver may still be importing: the server's process group (the
    server, its forkserver) is gone within seconds, so nothing outlives a run."""
    code = "from harness.run import host; s = host.start_server(); print(s.process.pid, flush=True)"
    parent = subprocess.Popen(
        [sys.executable, "-c", code + "; import time; time.sleep(120)"], stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and group_of(pid) != pid:  # its own group (os.setsid)
        time.sleep(0.05)
    assert group_of(pid) == pid
    parent.kill()
    parent.wait()
    while time.monotonic() < deadline and group_alive(pid):
        time.sleep(0.1)
    assert not group_alive(pid)


def group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def group_alive(pgid: int) -> bool:
    """Is any process (not a zombie) left in process group `pgid`?"""
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def test_the_host_server_and_a_groups_task_import_none_of_the_harnesss_models() -> None:
    """The server and the task (`relay_group`) only relay bytes: importing their module brings
    in no pydantic, no torch and no other harness module, so the server starts in a fraction
    of a second and Ray reuses the task's worker without it importing the harness."""
    code = (
        "import sys; from harness.run import host; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('harness', 'pydantic', 'torch', 'numpy'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [
        "harness",
        "harness.run",
        "harness.run.forking",
        "harness.run.host",
    ]


def test_harness_measure_records_its_rows_as_in_process(tmp_path: Path) -> None:
    rows = measure_group(point().group, [point()], context(tmp_path), lambda row: None)
    assert [r.provenance.process for r in rows] == ["in-process"]


def test_a_cuda_context_before_the_fork_makes_the_child_unsafe() -> None:
    def fake(initialized: bool, bad_fork: bool) -> Any:
        cuda = SimpleNamespace(is_initialized=lambda: initialized, _is_in_bad_fork=lambda: bad_fork)
        return SimpleNamespace(cuda=cuda)

    assert host.fork_unsafe(fake(False, False)) is None
    assert "CUDA context" in (host.fork_unsafe(fake(True, False)) or "")
    assert "bad fork" in (host.fork_unsafe(fake(False, True)) or "")


def test_exit_words_name_the_signal_or_the_code() -> None:
    assert host.exit_words(-15) == "was killed by signal 15 (SIGTERM)"
    assert host.exit_words(3) == "exited with code 3 before its last row"


# --- real Ray, real tiny model ------------------------------------------------------------

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

FAST_HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}
# From 3 runs of each path, alternated, on this machine (2 shared cores, load average 5-13 from
# other work): see test_memory_figures_are_the_groups_own.
TOLERANCE_MIB = 15.0


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1, "resources": {"accel:cpu": 1}, "labels": {"vendor": "cpu"},
            "_system_config": FAST_HEALTH,
        },
    )  # fmt: skip
    yield c
    ray.shutdown()
    c.shutdown()


def sweep_once(
    tmp_path: Path, address: str, name: str, contexts: str, output_tokens: int = 4
) -> Path:
    from harness.run.session import run_sweep

    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(SCENARIO.format(name=name, contexts=contexts, output_tokens=output_tokens))
    run_dir = tmp_path / name
    run_sweep(scenario, address, run_dir, False, None)
    return run_dir


MEMORY_FIGURES = ("peak_mib_load", "peak_mib_prefill", "peak_mib_decode")


@pytest.mark.slow
def test_memory_figures_are_the_groups_own(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same two points (batch 1, contexts 16 and 32) measured 3 times through a child of the
    pre-imported forkserver and 3 times in a fresh actor, alternated. Each path's rows say which
    process measured them. What the group adds agrees between the paths: the prefill and
    decode peaks above the load peak, per point, within TOLERANCE_MIB. The absolute figures
    differ by one offset, the same for the three figures (a process baseline, not the group):
    the fresh actor's figures are higher by Ray's core worker (92 MiB resident in an
    idle Ray actor here) and by the library pages its own imports touched (a forked child
    counts only those it touches again: 324 MiB at its start against 408 MiB for a plain
    process after the same imports); measured here, the offset was 106-107 MiB.

    The tolerance: per path, the 3 runs' spread (max - min) of a figure was at most 7.4 MiB
    (RSS sampled every 5 ms on a loaded machine), the load peak's at most 1.0 MiB; the paths'
    mean increments differed by at most 1.6 MiB. 15 MiB is twice the largest spread: a group
    whose memory really differed (another batch's activations, a second copy of the ~100 MiB
    model) is far outside it."""
    runs: dict[str, list[ResultRow]] = {"forkserver": [], "fresh": []}
    for i in range(3):
        for switch, path in (("1", "forkserver"), ("0", "fresh")):
            monkeypatch.setenv("HARNESS_FORKSERVER", switch)
            rows, bad = read_rows(sweep_once(tmp_path, cluster.address, f"{path}-{i}", "16, 32"))
            assert not bad and len(rows) == 2
            assert all(r.status == "ok" and r.provenance.process == path for r in rows)
            runs[path] += rows
    for context_len in (16, 32):
        per = {path: [r for r in rows if r.context == context_len] for path, rows in runs.items()}
        for phase in ("peak_mib_prefill", "peak_mib_decode"):
            added = {
                p: mean_of(rows, phase) - mean_of(rows, "peak_mib_load") for p, rows in per.items()
            }
            assert abs(added["forkserver"] - added["fresh"]) <= TOLERANCE_MIB, (phase, added)
        offsets = [mean_of(per["fresh"], f) - mean_of(per["forkserver"], f) for f in MEMORY_FIGURES]
        assert max(offsets) - min(offsets) <= TOLERANCE_MIB, offsets  # one baseline shift
        assert min(offsets) > TOLERANCE_MIB, offsets  # the forked child carries no Ray worker


def mean_of(rows: list[ResultRow], figure: str) -> float:
    return statistics.mean(float(getattr(r, figure)) for r in rows)


def group_children() -> list[psutil.Process]:
    """The group children of the cluster's node host: the children of a forkserver that is not
    this test process's own."""
    me = psutil.Process()
    servers = [
        p for p in me.children(recursive=True)
        if "multiprocessing.forkserver" in " ".join(p.cmdline()) and p.ppid() != me.pid
    ]  # fmt: skip
    return [c for s in servers for c in s.children()]


@pytest.mark.slow
def test_a_child_killed_mid_group_is_retried_as_a_lost_actor_is(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL to the group's child once its first row is written: the stream ends with
    ChildDied (no hang), the failure is in the manifest, and the points left are measured by a
    retry (a fresh child of the same host): every point once, none lost."""
    monkeypatch.setenv("HARNESS_FORKSERVER", "1")
    run_dir = tmp_path / "killed"
    killed: list[int] = []

    def kill_after_first_row() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            rows, _ = read_rows(run_dir) if run_dir.is_dir() else ([], [])
            children = group_children()
            if rows and children:
                for child in children:
                    child.kill()
                    killed.append(child.pid)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_after_first_row, daemon=True)
    killer.start()
    # 256 new tokens a point: a group's child starts in a fraction of a second and
    # its rows reach the run folder as fast; with 64-token points a loaded machine (the killer's
    # polling starved) saw the whole group end before the killer looked
    sweep_once(tmp_path, cluster.address, "killed", "16, 32, 48, 64", output_tokens=256)
    killer.join(timeout=5)
    assert killed, "the group ended before its child could be killed"
    rows, bad = read_rows(run_dir)
    assert not bad
    plan = sweep.prepare(tmp_path / "killed.yaml", run_dir)
    h = corpus.corpus_hash()
    assert sorted(r.key for r in rows) == sorted(p.key(h) for w in plan.work for p in w.points)
    assert all(r.status == "ok" and r.provenance.process == "forkserver" for r in rows)
    (failure,) = json.loads((run_dir / "manifest.json").read_text())["runs"][-1]["failures"]
    assert "ChildDied" in failure["error"] and "SIGKILL" in failure["error"], failure
    assert failure["points_left"] < 4  # the rows measured before the kill are kept


@pytest.mark.slow
def test_a_group_whose_host_server_cannot_be_reached_runs_in_a_fresh_actor(
    cluster: Cluster, server: host.HostServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The node's host hands out a server its group's task cannot reach (a wrong key here; a
    server that died, in life): the task answers Fallback, the driver says why once and runs
    the group in a fresh actor instead; every row is measured there, none lost."""
    from harness.run.session import sweep_locked

    monkeypatch.setenv("HARNESS_FORKSERVER", "1")
    unreachable = host.HostServer(server.process, forking.ServerInfo(server.info.address, b"wrong"))
    scenario = tmp_path / "unreached.yaml"
    scenario.write_text(SCENARIO.format(name="unreached", contexts="16, 32", output_tokens=4))
    run_dir = tmp_path / "unreached"
    sweep_locked(scenario, cluster.address, run_dir, False, None, False, unreachable)
    rows, bad = read_rows(run_dir)
    assert not bad and len(rows) == 2
    assert all(r.status == "ok" and r.provenance.process == "fresh" for r in rows)
    err = capfd.readouterr().err
    assert err.count("host server cannot be reached (AuthenticationError") == 1, err[-2000:]
