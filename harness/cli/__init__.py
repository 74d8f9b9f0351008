"""The `harness` command line (the console script is ``harness.cli:app``).

``main``: the app and the commands that plan, measure, run and inspect nodes; ``results``: the
commands that read a run (aggregate, report, compare).
"""

from harness.cli.main import app, main

__all__ = ["app", "main"]
