"""An offline Hugging Face cache in a temp dir: the hub's own layout, no network.

`models--org--name/refs/<revision>` holds the commit; `snapshots/<commit>/` holds the files
(copies here; the hub links them to `blobs/`, which the readers do not need).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

TINY = Path(__file__).resolve().parents[1] / "harness" / "data" / "tiny-llama"
LLAMA_8B_CONFIG = (
    Path(__file__).resolve().parents[1]
    / "harness"
    / "spec"
    / "catalog"
    / "configs"
    / "llama-3.1-8b"
    / "config.json"
)
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def add_snapshot(
    cache: Path,
    repo_id: str,
    files: dict[str, Path | str | bytes],
    *,
    commit: str = COMMIT,
    revision: str = "main",
) -> Path:
    """Put `files` (name → source path, text or bytes) in the cache under repo_id@revision."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    for name, content in files.items():
        target = snapshot / name
        if isinstance(content, Path):
            shutil.copyfile(content, target)
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return snapshot


def tiny_files(**config_changes: Any) -> dict[str, Path | str | bytes]:
    """The shipped tiny model's files (config.json edited by `config_changes`)."""
    files: dict[str, Path | str | bytes] = {
        p.name: p for p in TINY.iterdir() if p.is_file() and p.suffix in {".json", ".safetensors"}
    }
    if config_changes:
        config = json.loads((TINY / "config.json").read_text())
        files["config.json"] = json.dumps({**config, **config_changes})
    return files


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache, offline: HF_HUB_CACHE points at it, HF_HUB_OFFLINE=1."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache
