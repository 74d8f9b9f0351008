"""One environment builder for the serving phase's children: the server and the load generator
both start in `subprocess_env`'s environment (this checkout first on PYTHONPATH, no usage report,
the caller's extras on top), checked in what a stand-in child prints."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from harness.modes.serving.device import env
from harness.modes.serving.device.loadgen import LevelRun, run_level
from harness.modes.serving.device.run import ENGINE_CORE_ENV, serve_points
from harness.modes.serving.device.server import ServerConfig, ServerError, VllmServer
from harness.modes.serving.spec import Load, SloTargets
from harness.run.contracts import WorkContext
from harness.run.device import Job
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Reference
from tests.run.test_device import SERVED

# A stand-in child: prints what the builder gives it, then exits (a server "not ready").
PROBE = (
    sys.executable, "-c",
    "import os; print('PYTHONPATH=' + os.environ['PYTHONPATH']);"
    "print('NO_USAGE=' + os.environ['VLLM_NO_USAGE_STATS']);"
    "print('ENGINE=' + os.environ.get('VLLM_ENABLE_V1_MULTIPROCESSING', '-'));"
    "print('UNBUFFERED=' + os.environ.get('PYTHONUNBUFFERED', '-'))",
    "--",
)  # fmt: skip


def test_the_repo_root_is_the_folder_with_pyproject() -> None:
    # this file is <root>/tests/modes/serving/device/test_env.py: the root is four folders up
    checkout = Path(__file__).resolve().parents[4]
    assert checkout == env.REPO_ROOT
    assert (checkout / "pyproject.toml").is_file()


def test_the_checkout_comes_first_and_the_extras_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv("VLLM_NO_USAGE_STATS", "0")
    built = env.subprocess_env({"DO_NOT_TRACK": "0", "X": "1"})
    assert built["PYTHONPATH"] == os.pathsep.join((str(env.REPO_ROOT), "/elsewhere"))
    assert built["VLLM_NO_USAGE_STATS"] == "1"  # no usage report, whatever the caller had
    assert built["DO_NOT_TRACK"] == "0" and built["X"] == "1"
    assert os.environ["VLLM_NO_USAGE_STATS"] == "0"  # the caller's own is left alone


def probe_config() -> ServerConfig:
    return ServerConfig(model="m", served_model_name="tiny")


def test_the_server_starts_in_the_builders_environment(tmp_path: Path) -> None:
    server = VllmServer(probe_config(), log_path=tmp_path / "server.log", command=PROBE,
                        startup_timeout_s=30, env=ENGINE_CORE_ENV)  # fmt: skip
    with pytest.raises(ServerError):
        server.start()
    log = (tmp_path / "server.log").read_text()
    assert f"PYTHONPATH={env.REPO_ROOT}" in log and "NO_USAGE=1" in log and "ENGINE=1" in log


def test_the_load_generator_starts_in_the_builders_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an in-process vLLM engine earlier in the same test process sets this in os.environ
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    server = VllmServer(probe_config(), log_path=tmp_path / "server.log", port=8123)
    monkeypatch.setattr(server, "alive", lambda: True)  # a live server, as far as it can tell
    slo = SloTargets(ttft_ms_p99=1000, tpot_ms_p99=100)
    level = Load(concurrency=1)
    dataset = tmp_path / "d.jsonl"
    result = run_level(server, level, LevelRun(dataset, tmp_path, slo, 1, command=PROBE))
    assert result.status == "error"  # the probe writes no result
    log = (tmp_path / "c1.bench.log").read_text()
    assert f"PYTHONPATH={env.REPO_ROOT}" in log and "NO_USAGE=1" in log
    assert "UNBUFFERED=1" in log and "ENGINE=-" in log  # the server's engine setting is its own


def test_a_serving_setup_that_fails_gives_every_level_an_error_row_with_its_card_and_generator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.modes.serving.device import run as serving

    def broken(*args: object) -> None:
        raise ValueError("no such engine argument")

    monkeypatch.setattr(serving, "server_config", broken)
    ctx = WorkContext(
        run_dir=str(tmp_path), run="r", reference=Reference(), quality=QualitySettings(),
        reference_backend="vllm",
    )  # fmt: skip
    job = Job(ctx=ctx, device="cpu", model_path="m", tokenizer_dir="t", corpus_hash="c")
    rows = list(serve_points(SERVED.group, [SERVED, SERVED], job))
    assert [r.status for r in rows] == ["error", "error"]
    assert all("serving setup: ValueError" in (r.error or "") for r in rows)
    assert all((r.provenance.load_generator or "").startswith("vllm bench serve") for r in rows)
    assert all(r.gpu == "cpu" and not r.is_reference for r in rows)  # the card that ran them
