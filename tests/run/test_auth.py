"""Ray token auth: the token file, what joining without it says, and a real cluster that refuses
drivers and worker nodes holding the wrong token while the sweep runs for the right one."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.run import auth

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny-sweep.yaml"


@pytest.fixture
def own_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ray" / "auth_token"
    monkeypatch.setenv(auth.TOKEN_PATH_VAR, str(path))
    monkeypatch.delenv(auth.TOKEN_VAR, raising=False)
    monkeypatch.delenv(auth.MODE_VAR, raising=False)
    return path


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_missing_token_is_created_readable_by_its_owner_only(own_token: Path) -> None:
    assert auth.ensure_token() == own_token
    token = own_token.read_text()
    assert len(token) == 64 and int(token, 16) >= 0  # 256 bits, hex
    assert mode_of(own_token) == 0o600
    assert auth.ensure_token() == own_token and own_token.read_text() == token  # kept, not rotated


def test_an_existing_world_readable_token_is_refused_and_left_as_it_is(own_token: Path) -> None:
    own_token.parent.mkdir(parents=True)
    own_token.write_text("a" * 64)
    own_token.chmod(0o644)
    with pytest.raises(UserInputError, match="chmod 600"):
        auth.ensure_token()
    assert mode_of(own_token) == 0o644 and own_token.read_text() == "a" * 64


def test_token_mode_is_the_default_and_an_explicit_opt_out_is_respected(
    own_token: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth.require_token_mode()
    assert os.environ[auth.MODE_VAR] == "token"
    monkeypatch.setenv(auth.MODE_VAR, "disabled")
    auth.require_token_mode()
    assert os.environ[auth.MODE_VAR] == "disabled"
    assert auth.ensure_token() is None and not own_token.exists()
    lines = auth.join_instructions("10.0.0.1:6379")
    assert "OFF" in lines[0] and "run code" in lines[0]


def test_joining_without_a_token_says_what_to_set(own_token: Path) -> None:
    with pytest.raises(UserInputError) as err:
        auth.require_token_to_join("10.0.0.1:6379")
    message = str(err.value)
    assert auth.TOKEN_PATH_VAR in message and str(own_token) in message
    auth.write_secret(own_token, "e" * 64)
    auth.require_token_to_join("10.0.0.1:6379")  # a token present: no objection


def test_join_instructions_name_the_file_never_the_token(own_token: Path) -> None:
    auth.ensure_token()
    text = "\n".join(auth.join_instructions("10.0.0.1:6379"))
    assert str(own_token) in text and "10.0.0.1:6379" in text
    assert own_token.read_text() not in text


# --------------------------------------------------------------------------- a real cluster

ray = pytest.importorskip("ray")


@pytest.fixture
def token_cluster(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A head started as users start one (`harness node start --head`), with a token of its own;
    yields its address and what the command printed."""
    token = tmp_path / "head_token"
    auth.write_secret(token, "c" * 64)
    port = free_port()
    temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # socket paths < 108 bytes
    env = {**head_env(token), "RAY_TMPDIR": str(temp_dir)}
    started = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "node", "start", "--head", f"--port={port}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
        yield f"127.0.0.1:{port}", started.stdout
    finally:
        stop_session(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def head_env(token: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (auth.TOKEN_VAR, "RAY_ADDRESS")}
    env.update({auth.MODE_VAR: "token", auth.TOKEN_PATH_VAR: str(token)})
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_session(temp_dir: Path) -> None:
    """Stop only this head's processes (`ray stop` would stop every cluster of this user)."""
    import psutil

    mine = [
        p
        for p in psutil.process_iter(["cmdline"])
        if str(temp_dir) in " ".join(p.info["cmdline"] or [])
    ]
    for p in mine:
        p.terminate()
    _, alive = psutil.wait_procs(mine, timeout=10)
    for p in alive:
        p.kill()


def harness_run(address: str, token: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli.main",
            "run",
            str(FIXTURE),
            "--address",
            address,
            "--out",
            str(out),
        ],
        env=head_env(token),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_a_token_cluster_refuses_the_wrong_token_and_runs_the_sweep_for_the_right_one(
    token_cluster: tuple[str, str], tmp_path: Path
) -> None:
    address, printed = token_cluster
    head_token = tmp_path / "head_token"
    assert str(head_token) in printed and "c" * 64 not in printed  # where, never what
    assert f"{auth.TOKEN_PATH_VAR}=<copied file> harness node start --address" in printed

    wrong = tmp_path / "wrong_token"
    auth.write_secret(wrong, "d" * 64)

    began = time.monotonic()
    refused = harness_run(address, wrong, tmp_path / "refused")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert time.monotonic() - began < 60  # Ray gives up after ~20 s; the harness asks first
    assert "refuses this machine's token" in refused.stderr and "InvalidAuthToken" in refused.stderr
    assert not (tmp_path / "refused" / "points").exists() or not any(
        (tmp_path / "refused" / "points").iterdir()
    )

    missing = harness_run(address, tmp_path / "no_such_token", tmp_path / "missing")
    assert missing.returncode == 2 and auth.TOKEN_PATH_VAR in missing.stderr

    worker = subprocess.run(
        [
            str(Path(sys.executable).parent / "ray"),
            "start",
            f"--address={address}",
            "--num-cpus=1",
            "--disable-usage-stats",
        ],
        env=head_env(wrong),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert worker.returncode != 0 and "InvalidAuthToken" in worker.stdout + worker.stderr

    ran = harness_run(address, head_token, tmp_path / "ran")
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert any((tmp_path / "ran" / "points").glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("ray_first", [True, False])
def test_a_local_run_starts_its_own_token_cluster_whatever_was_imported_first(
    ray_first: bool, tmp_path: Path
) -> None:
    """`make bench` sets no RAY_AUTH_MODE: the harness turns token mode on, creates the token
    (0600) and its driver joins its own new cluster with it, also when Ray was imported first
    (Ray's core had already read the mode then)."""
    token = tmp_path / "tok" / "auth_token"
    code = (
        ("import ray\n" if ray_first else "")
        + "from harness.run import driver\nimport ray\n"
        + "print(driver.connect(None)['address'], ray.cluster_resources()['CPU'])\nray.shutdown()\n"
    )
    env = head_env(token)
    env.pop(auth.MODE_VAR)
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    finally:
        stop_session(Path(env["RAY_TMPDIR"]))
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[0] == "local"
    assert mode_of(token) == 0o600 and len(token.read_text()) == 64
