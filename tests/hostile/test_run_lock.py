"""One run folder, one writer: a second harness command on a folder in use is refused in one line
naming the holder's pid and host (exit 2); a lock left by a process that is gone is taken over,
and the user is told."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.errors import UserInputError
from harness.run import store
from tests import factories as F

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from harness.run import store
    with store.run_lock(Path(sys.argv[1]), "measure"):
        print("held", flush=True)
        time.sleep(60)
    """
)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A run folder whose lock another process holds (as a running `harness measure` would)."""
    folder = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield folder, proc
    proc.kill()
    proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_writer_is_refused_naming_the_holders_pid_and_host(
    held: tuple[Path, subprocess.Popen[str]],
) -> None:
    folder, proc = held
    with pytest.raises(UserInputError) as err, store.run_lock(folder, "report"):
        pass
    line = err.value.render()
    assert f"pid {proc.pid}" in line and socket.gethostname() in line and "\n" not in line


def test_measure_on_a_folder_in_use_exits_2_in_one_line_and_writes_nothing(
    held: tuple[Path, subprocess.Popen[str]],
) -> None:
    folder, proc = held
    scenario = Path(__file__).parents[1] / "fixtures" / "tiny-sweep.yaml"
    result = CliRunner().invoke(app, ["measure", str(scenario), "--out", str(folder)])
    assert result.exit_code == 2, result.output
    assert f"pid {proc.pid}" in result.output and "Traceback" not in result.output
    assert not (folder / store.POINTS).exists() and not (folder / store.MANIFEST).exists()


@pytest.mark.parametrize("command", ["aggregate", "report"])
def test_aggregate_and_report_on_a_folder_in_use_are_refused(
    held: tuple[Path, subprocess.Popen[str]], command: str
) -> None:
    folder, proc = held
    F.write_run(folder, F.small_grid())
    result = CliRunner().invoke(app, [command, str(folder)])
    assert result.exit_code == 2, result.output
    assert f"pid {proc.pid}" in result.output
    assert not (folder / "published").exists()


def test_a_site_into_a_folder_in_use_is_refused(tmp_path: Path) -> None:
    run = F.write_run(tmp_path / "run", F.small_grid())
    site = tmp_path / "site"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD.replace("Path(sys.argv[1]), ", "Path(sys.argv[1]).parent, ")
         .replace('"measure"', '"site", lock=Path(sys.argv[2])'), str(site),
         str(tmp_path / ".site.lock")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        result = CliRunner().invoke(app, ["site", str(run), "--out", str(site)])
    finally:
        proc.kill()
        proc.wait()
    assert result.exit_code == 2, result.output
    assert f"pid {proc.pid}" in result.output and not site.exists()


def test_a_lock_left_by_a_dead_process_is_taken_over_and_the_user_is_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    pid = dead_pid()
    record = {"pid": pid, "host": socket.gethostname(), "command": "measure", "since": "x"}
    store.lock_path(folder).write_text(json.dumps(record))
    with store.run_lock(folder, "measure"):
        mine = json.loads(store.lock_path(folder).read_text())
    assert mine["pid"] == os.getpid()
    told = capsys.readouterr().err
    assert f"pid {pid}" in told and "took over" in told


def test_a_lock_still_held_in_the_name_of_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    """A lock kept by a child that inherited it, in the name of a harness process that died."""
    folder = tmp_path / "run"
    folder.mkdir()
    pid = dead_pid()
    orphan = textwrap.dedent(
        f"""
        import fcntl, json, os, socket, sys, time
        fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps({{"pid": {pid}, "host": socket.gethostname()}}).encode())
        print("held", flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", orphan, str(store.lock_path(folder))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with store.run_lock(folder, "measure"):
            assert json.loads(store.lock_path(folder).read_text())["pid"] == os.getpid()
    finally:
        proc.kill()
        proc.wait()


def test_the_same_process_may_nest_its_own_lock_and_releases_it(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    with store.run_lock(folder, "report"), store.run_lock(folder, "report"):
        pass
    with store.run_lock(folder, "measure"):  # released: taken again at once
        pass
    assert not store.lock_path(folder).exists()  # a clean release leaves nothing behind


def test_a_symlink_planted_as_the_lock_is_never_followed(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    store.lock_path(folder).symlink_to(victim)
    with pytest.raises(UserInputError, match="symlink"), store.run_lock(folder, "measure"):
        pass
    assert victim.read_text() == "keep me"


def test_a_refused_command_leaves_no_folder_made_only_for_its_lock(tmp_path: Path) -> None:
    folder = tmp_path / "new-run"
    with pytest.raises(UserInputError), store.run_lock(folder, "measure"):
        raise UserInputError("bad scenario")
    assert not folder.exists()
