"""The driver's watch for dead nodes (harness.run.driver.Driver.check_lost_nodes), no Ray needed.

Ray fails a fresh actor's stream as soon as the GCS marks its node dead, but a task's stream only
when the call to its worker fails: for a node cut off from the network, when gRPC's keepalive
gives up (measured in the image test: 414 s after the cut, 351 s after the GCS had marked the
node dead). The driver therefore asks the GCS for dead nodes itself and retries (or loses) each
attempt running on one. Here the GCS's answer (`node_inventory`) and the retry are stand-ins;
the real path is the image test's network cut (.ci/images.sh, step `cut`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.run import driver, sweep
from harness.run.launchers.actor import ActorLauncher
from harness.spec.quality import QualitySettings
from tests import factories as F

# Loads an engine or starts Ray: not in `make test-fast` (tests/conftest.py).
pytestmark = pytest.mark.ray

QUALITY = QualitySettings(window_tokens=64, max_windows=2, arc_items=2, bootstrap_samples=200)


class NoActor:
    def __init__(self, simulate_on_cpu: bool = False) -> None: ...


def attempt(node_id: str | None, context: int) -> driver.Attempt:
    point = F.tiny_point(QUALITY, context=context)
    work = sweep.Work(group=point.group, points=[point], reference=False, est_seconds=1.0)
    return driver.Attempt(work=work, points=[point], stream=f"stream-{context}", node_id=node_id)


@pytest.fixture
def watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A driver whose GCS says node `b` is dead, and which records what it retries."""
    d = driver.Driver(tmp_path, F.work_context(tmp_path, QUALITY), [ActorLauncher(NoActor)])
    asked: list[int] = []
    retried: list[tuple[driver.Attempt, BaseException]] = []

    def inventory() -> list[dict[str, Any]]:
        asked.append(1)
        return [{"node_id": "a", "alive": True}, {"node_id": "b", "alive": False}]

    def retry(a: driver.Attempt, exc: BaseException) -> bool:
        retried.append((a, exc))
        a.stream = f"{a.stream}-retry"
        return True

    monkeypatch.setattr(driver, "node_inventory", inventory)
    monkeypatch.setattr(d, "retry_or_lose", retry)
    return d, asked, retried


def test_an_attempt_on_a_dead_node_is_retried_under_a_new_stream(watched: Any) -> None:
    d, asked, retried = watched
    on_a, on_b, queued = attempt("a", 16), attempt("b", 32), attempt(None, 48)
    running = {a.stream: a for a in (on_a, on_b, queued)}
    since: dict[int, float] = {}
    d.check_lost_nodes(running, since)
    assert asked == [1]
    ((again, error),) = retried
    assert again is on_b and isinstance(error, driver.NodeLost) and "node b dead" in str(error)
    assert set(running) == {"stream-16", "stream-48", "stream-32-retry"}
    assert running["stream-32-retry"] is on_b and id(on_b) in since


def test_the_gcs_is_asked_at_most_once_per_watch_interval(watched: Any) -> None:
    d, asked, retried = watched
    running = {"stream-16": attempt("a", 16)}
    for _ in range(3):
        d.check_lost_nodes(running, {})
    assert asked == [1] and not retried
    d.nodes_checked -= driver.NODE_WATCH_S
    d.check_lost_nodes(running, {})
    assert asked == [1, 1]


def test_a_lost_attempt_that_cannot_be_retried_leaves_the_running_set(
    watched: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, _, retried = watched
    monkeypatch.setattr(d, "retry_or_lose", lambda a, exc: retried.append((a, exc)) and False)
    running = {"stream-32": attempt("b", 32)}
    d.check_lost_nodes(running, {})
    assert running == {} and len(retried) == 1
