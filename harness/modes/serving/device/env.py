"""The environment of every process the serving phase starts (`vllm serve`, `vllm bench serve`).

One builder, `subprocess_env(extra)`: the caller's environment, then `NO_USAGE_REPORT` (no usage
report leaves the machine), then `extra`, and this checkout first on PYTHONPATH: the children run
`python -m harness.modes.serving.device.vllm_cli`, which must import this package wherever the
caller's working directory is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# The repository root (the folder holding pyproject.toml and harness/): this file is
# <root>/harness/modes/serving/device/env.py.
REPO_ROOT = Path(__file__).resolve().parents[4]
# Every child gets these (on top of the caller's environment): vLLM's usage stats stay off.
NO_USAGE_REPORT: dict[str, str] = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def subprocess_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process: os.environ, `NO_USAGE_REPORT`, `extra` (later ones
    win), with `REPO_ROOT` prepended to PYTHONPATH."""
    env = {**os.environ, **NO_USAGE_REPORT, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env
