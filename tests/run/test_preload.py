"""harness.run.preload: importing it turns the cyclic garbage collector off (the forkserver's
first import, before the engines)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_it_turns_the_garbage_collector_off() -> None:
    code = "import gc; on = gc.isenabled(); import harness.run.preload; print(on, gc.isenabled())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "False"]
