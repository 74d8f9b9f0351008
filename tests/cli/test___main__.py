"""harness.cli.__main__: `python -m harness.cli` is the command line (what the containers'
entrypoint runs)."""

from __future__ import annotations

import subprocess
import sys


def test_python_dash_m_harness_cli_runs_the_app() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout and "plan" in done.stdout
