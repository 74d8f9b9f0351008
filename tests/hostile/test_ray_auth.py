"""Ray auth edges: a token file is used only when it is a regular file of this user, readable by
no one else, holding a well-formed token; anything else is one line and the file is left as it
is (never chmod-ed, never adopted). A wrong token is refused from Ray's first InvalidAuthToken
within 3 s, in one line that does not suggest `ray stop`. A head port among Ray's own is refused
before `ray start`."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.errors import UserInputError
from harness.run import auth, node

GOOD = "ab" * 32


@pytest.fixture
def token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ray" / "auth_token"
    path.parent.mkdir()
    monkeypatch.setenv(auth.TOKEN_PATH_VAR, str(path))
    monkeypatch.delenv(auth.TOKEN_VAR, raising=False)
    monkeypatch.delenv(auth.MODE_VAR, raising=False)
    return path


def snapshot(path: Path) -> tuple[int, bytes]:
    info = os.stat(path)
    return stat.S_IMODE(info.st_mode), path.read_bytes()


def refused_untouched(victim: Path) -> str:
    before = snapshot(victim)
    for call in (auth.ensure_token, lambda: auth.require_token_to_join("10.0.0.1:6379")):
        with pytest.raises(UserInputError) as err:
            call()
        assert "left as it is" in err.value.render() and "\n" not in err.value.render()
    assert snapshot(victim) == before
    return err.value.render()


def test_a_symlink_to_someone_elses_file_is_refused_and_left_alone(
    token: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "notes.txt"
    victim.write_text("my notes, not a token\n")
    victim.chmod(0o644)
    token.symlink_to(victim)
    assert "symlink" in refused_untouched(victim)


def test_a_token_readable_by_others_is_refused_not_tightened(token: Path) -> None:
    token.write_text(GOOD)
    token.chmod(0o644)
    assert "chmod 600" in refused_untouched(token)


def test_a_private_file_that_holds_no_token_is_refused(token: Path) -> None:
    token.write_text("export PATH=/usr/bin\n")
    token.chmod(0o600)
    assert "does not hold a Ray token" in refused_untouched(token)


def test_an_empty_file_is_not_rewritten(token: Path) -> None:
    token.write_text("")
    token.chmod(0o600)
    refused_untouched(token)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_token_of_another_user_is_refused(token: Path) -> None:
    token.write_text(GOOD)
    token.chmod(0o600)
    os.chown(token, 4242, 4242)
    assert "4242" in refused_untouched(token)


def test_a_well_formed_private_token_is_used_as_it_is(token: Path) -> None:
    token.write_text(GOOD + "\n")
    token.chmod(0o600)
    assert auth.ensure_token() == token and auth.token_value() == GOOD
    assert snapshot(token) == (0o600, (GOOD + "\n").encode())


def test_a_token_the_harness_creates_is_accepted_by_its_own_check(token: Path) -> None:
    path = auth.ensure_token()
    assert path == token and auth.TOKEN_FORM.fullmatch(auth.token_value() or "")
    assert stat.S_IMODE(token.stat().st_mode) == 0o600


@pytest.mark.parametrize("port", [10002, 15000, 19999, 10001, 8265, 52365, 80, 70000])
def test_a_head_port_among_rays_own_is_refused_before_ray_start(port: int) -> None:
    result = CliRunner().invoke(app, ["node", "start", "--head", f"--port={port}", "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "--port" in result.output and "ray start" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_rays_default_port_ranges_are_read_from_ray() -> None:
    pytest.importorskip("ray")
    ports = node.ray_default_ports()
    assert ports["min_worker_port"] < ports["max_worker_port"]
    assert node.port_problem(6379) is None


# --------------------------------------------------------------------------- a real head

ray = pytest.importorskip("ray")


@pytest.mark.slow
def test_a_wrong_token_is_refused_within_3_s_without_ray_stop_advice(tmp_path: Path) -> None:
    from tests.run.test_auth import harness_run, stop_session

    head = tmp_path / "head_token"
    auth.write_secret(head, "c" * 64)
    port = free_port()
    temp = Path(f"/tmp/ray-hostile-{os.getpid()}")
    env = {k: v for k, v in os.environ.items() if k not in (auth.TOKEN_VAR, "RAY_ADDRESS")}
    env.update({auth.MODE_VAR: "token", auth.TOKEN_PATH_VAR: str(head), "RAY_TMPDIR": str(temp),
                "RAY_USAGE_STATS_ENABLED": "0"})  # fmt: skip
    started = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "node", "start", "--head", f"--port={port}"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        wrong = tmp_path / "wrong_token"
        auth.write_secret(wrong, "d" * 64)
        began = time.monotonic()
        refused = harness_run(f"127.0.0.1:{port}", wrong, tmp_path / "refused")
        took = time.monotonic() - began
    finally:
        stop_session(temp)
    assert refused.returncode == 2, refused.stderr[-2000:]
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "InvalidAuthToken" in errors[0]
    assert "ray stop" not in refused.stdout + refused.stderr
    assert took < 3 + 10, took  # the refusal within 3 s, plus the harness's own start-up


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
