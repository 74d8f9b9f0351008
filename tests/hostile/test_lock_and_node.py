"""The run lock against what a hostile folder holds, `harness node start --address` against what a
hostile address is, and the forkserver switch against values it does not know: each is one line
and exit 2 (or, where it is safe, a stale lock taken over), never a traceback, a hang or a
command line that runs more than `ray start`."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.errors import UserInputError
from harness.run import forking, node, store

SCENARIO = Path(__file__).parents[1] / "fixtures" / "tiny-sweep.yaml"
HUGE_PID = 10**30  # no process can have it: Linux's pid_max is at most 2**22


def one_line_error(output: str) -> str:
    lines = [x for x in output.splitlines() if x.strip()]
    assert len(lines) == 1, output[-2000:]
    assert "Traceback" not in output and lines[0].startswith("error: ")
    assert len(lines[0]) < 600, lines[0][:600]
    return lines[0]


# --- the run lock ------------------------------------------------------------------------------


def test_a_folder_where_the_lock_file_goes_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run = tmp_path / "run"
    store.lock_path(run).mkdir(parents=True)
    result = CliRunner().invoke(app, ["measure", str(SCENARIO), "--out", str(run)])
    assert result.exit_code == 2, result.output[-2000:]
    line = one_line_error(result.output)
    assert ".harness.lock" in line and "is a folder" in line
    assert sorted(p.name for p in run.iterdir()) == [store.LOCK]  # nothing written, not removed


def test_a_lock_that_is_a_symlink_loop_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    store.lock_path(run).symlink_to(store.LOCK)  # the link points at itself
    with pytest.raises(UserInputError, match="symlink"), store.run_lock(run, "measure"):
        pass
    assert store.lock_path(run).is_symlink()  # left as it was


def test_a_lock_record_with_an_impossible_pid_is_taken_over_as_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    record = {"pid": HUGE_PID, "host": socket.gethostname(), "command": "measure"}
    store.lock_path(run).write_text(json.dumps(record))
    with store.run_lock(run, "measure"):
        assert json.loads(store.lock_path(run).read_text())["pid"] == os.getpid()
    assert "took over" in capsys.readouterr().err


@pytest.fixture
def held_with_huge_pid(tmp_path: Path) -> Iterator[Path]:
    """A lock file flock-held by a live process that is no harness (a child that inherited the
    lock), its record naming a pid no process can have."""
    run = tmp_path / "run"
    run.mkdir()
    holder = textwrap.dedent(
        f"""
        import fcntl, json, os, socket, sys, time
        fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps({{"pid": {HUGE_PID}, "host": socket.gethostname()}}).encode())
        print("held", flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder, str(store.lock_path(run))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield run
    finally:
        proc.kill()
        proc.wait()


def test_a_held_lock_naming_an_impossible_pid_is_stale_not_a_traceback(
    held_with_huge_pid: Path,
) -> None:
    """The same rule as a recorded pid that has died: no harness wrote 10**30 (each writes its
    own pid), so the harness that recorded it is not running."""
    with store.run_lock(held_with_huge_pid, "measure"):
        mine = json.loads(store.lock_path(held_with_huge_pid).read_text())
    assert mine["pid"] == os.getpid()


# --- node start --address ----------------------------------------------------------------------


@pytest.fixture
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """Token auth off, so that only the address decides (a join otherwise needs a token file)."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")


@pytest.fixture
def no_ray_start(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """`ray start` never runs: a call to it is recorded instead."""
    calls: list[Any] = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **_: calls.append(argv))
    monkeypatch.setattr(os, "execvp", lambda *argv: calls.append(argv))
    return calls


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("notahostport", "expected HOST:PORT"),
        ("127.0.0.1:99999", "port 99999 is outside 1..65535"),
        ("127.0.0.1:0", "port 0 is outside 1..65535"),
        ("127.0.0.1:6379;touch pwned", "expected HOST:PORT"),
        ("$(touch pwned):6379", "expected HOST:PORT"),
        ("head name:6379", "neither a hostname nor an IP address"),
        ("-rf:6379", "neither a hostname nor an IP address"),
        ("1.2.3.4.5:6379", "neither a hostname nor an IP address"),
        ("::1:6379", "expected HOST:PORT"),
    ],
)
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_bad_head_address_is_refused_in_one_line_before_any_command(
    address: str, expected: str, dry_run: bool, no_token: None, no_ray_start: list[Any]
) -> None:
    argv = ["node", "start", "--address", address] + (["--dry-run"] if dry_run else [])
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output[-2000:]
    line = one_line_error(result.output)
    assert "--address" in line and expected in line
    assert "ray start" not in result.output and "start --address" not in result.output
    assert no_ray_start == []


@pytest.mark.parametrize("address", ["10.0.0.7:6379", "head-0.cluster.local:6379", "[::1]:6379"])
def test_a_good_address_is_printed_as_one_shell_quoted_command(
    address: str, no_token: None, no_ray_start: list[Any]
) -> None:
    result = CliRunner().invoke(app, ["node", "start", "--address", address, "--dry-run"])
    assert result.exit_code == 0, result.output[-2000:]
    (line,) = [x for x in result.output.splitlines() if " start " in x]
    # the shell reads back exactly the argv the harness would run: the JSON of --resources
    # (quotes, braces) is quoted, the address stays one word
    assert shlex.split(line) == node.start_command(False, address, node.detect())
    assert f"--address={address}" in shlex.split(line)


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_joining_a_head_that_is_not_there_is_one_line_before_ray_start(
    no_token: None, no_ray_start: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node, "CONNECT_TIMEOUT_S", 2.0)  # a closed port refuses at once anyway
    address = f"127.0.0.1:{closed_port()}"
    result = CliRunner().invoke(app, ["node", "start", "--address", address])
    assert result.exit_code == 2, result.output[-2000:]
    line = one_line_error(result.output)
    assert f"no Ray cluster answers at {address}" in line and "--address" in line
    assert no_ray_start == []  # never handed to Ray, which retries for minutes


def test_a_dry_run_join_does_not_ask_the_head(no_token: None, no_ray_start: list[Any]) -> None:
    """--dry-run prints the command for later (the head may not be up yet): no probe."""
    address = f"127.0.0.1:{closed_port()}"
    result = CliRunner().invoke(app, ["node", "start", "--address", address, "--dry-run"])
    assert result.exit_code == 0, result.output[-2000:]
    assert f"--address={address}" in result.output and no_ray_start == []


# --- HARNESS_FORKSERVER ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "no", "off", " off "])
def test_every_documented_off_value_turns_the_forkserver_off(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(forking.FORKSERVER_SWITCH, value)
    assert forking.forkserver_off() == f"HARNESS_FORKSERVER={value.strip().lower()}"


@pytest.mark.parametrize("value", ["1", "true", "Yes", "on", ""])
def test_every_documented_on_value_keeps_it_on(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(forking.FORKSERVER_SWITCH, value)
    assert forking.forkserver_off() is None


def test_the_switch_unset_keeps_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(forking.FORKSERVER_SWITCH, raising=False)
    assert forking.forkserver_off() is None


@pytest.mark.parametrize("value", ["flase", "2", "disabled", "0 1", "\x1b[31m"])
def test_a_value_the_switch_does_not_know_is_refused_in_one_line(
    value: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(forking.FORKSERVER_SWITCH, value)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(SCENARIO), "--out", str(out)])
    assert result.exit_code == 2, result.output[-2000:]
    line = one_line_error(result.output)
    assert line.startswith("error: HARNESS_FORKSERVER: ") and "0 (or false, no, off)" in line
    assert "\x1b" not in line
    assert not out.exists()  # refused before the host server, Ray or the run folder
