"""Tests never reach a model hub: Hugging Face offline mode for every test process.

Ray clusters in tests run with token auth on, as users' clusters do; the token file is this
session's own (0600, in a temporary folder), so no test reads or writes ~/.ray.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "token")
if "RAY_AUTH_TOKEN_PATH" not in os.environ and "RAY_AUTH_TOKEN" not in os.environ:
    folder = Path(tempfile.mkdtemp(prefix="harness-ray-auth-"))
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(folder / "auth_token")

from harness.run import auth

auth.ensure_token()
