"""Atomic file writes: a temp file in the same folder, fsync, rename.

A killed process leaves either the old file or the new one, never half of one. Every file the
harness writes (rows, manifests, window scores, tokenized corpora, publications) goes through here.
Files get the mode an ordinary ``open`` would give (0666 less the process umask: 0644 by default),
not ``mkstemp``'s private 0600.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def umask() -> int:
    """The process umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def public_mode(path: Path | str, *, folder: bool = False) -> None:
    """Give a file made by ``mkstemp`` (or a folder by ``mkdtemp``) the umask's usual mode."""
    os.chmod(path, (0o777 if folder else 0o666) & ~umask())


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """``mode`` None: what ``open`` would give; a secret passes 0o600 and is never readable by
    others, not even before the rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask() if mode is None else mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename in (None, tmp):
            exc.filename = str(path)  # a full disk is told about the file meant, not the temp
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
