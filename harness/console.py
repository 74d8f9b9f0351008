"""The terminal: one console for tables and one for errors and progress, shared by the CLI.

Logs (no terminal) get 160 columns, so tables stay readable in `make bench > log`.
"""

from __future__ import annotations

import sys

from rich.console import Console

LOG_WIDTH = 160

console = Console(width=None if sys.stdout.isatty() else LOG_WIDTH)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else LOG_WIDTH)
