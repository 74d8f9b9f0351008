"""Tests never reach a model hub: Hugging Face offline mode for every test process."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
