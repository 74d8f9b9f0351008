"""harness.peers.machine: the share of the machine others used, the tools' environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.peers import machine


def test_foreign_share_is_what_others_used_of_the_machine() -> None:
    assert machine.foreign_share(busy_cpu_s=3.0, own_cpu_s=2.0, wall_s=2.0, cores=2) == 0.25
    assert machine.foreign_share(busy_cpu_s=1.0, own_cpu_s=1.5, wall_s=2.0, cores=2) == 0.0
    assert machine.foreign_share(busy_cpu_s=9.0, own_cpu_s=0.0, wall_s=2.0, cores=2) == 1.0
    assert machine.foreign_share(busy_cpu_s=1.0, own_cpu_s=0.0, wall_s=0.0, cores=2) == 0.0


def test_the_child_environment_keeps_what_is_set_and_adds_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    env = machine.child_env({"EXTRA": "1"})
    assert env["HF_HUB_OFFLINE"] == "0"  # the caller's setting wins over the default
    assert env["TOKENIZERS_PARALLELISM"] == "false"
    assert env["EXTRA"] == "1"


def test_the_machine_has_busy_seconds_and_this_process_cpu_time() -> None:
    assert machine.machine_busy_s() > 0
    assert machine.own_cpu_s() > 0


def test_a_failure_says_which_tool_and_ends_with_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "x.log"
    log.write_text("first\nlast line\n")
    with pytest.raises(SystemExit) as exit_:
        machine.fail("tool", "it broke", log, tail=10)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "tool: error: it broke\nlast line\n\n"
