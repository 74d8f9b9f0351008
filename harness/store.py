"""Where results live: results/<run>/points/<key>.json (one ResultRow each) and manifest.json.

Every write is atomic (temp file in the same folder, fsync, rename), so a killed process leaves
either the old file or the new one, never half of one. Resume reads what is there.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.schema import ResultRow

POINTS = "points"
MANIFEST = "manifest.json"


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def point_path(run_dir: Path, key: str) -> Path:
    return Path(run_dir) / POINTS / f"{key}.json"


def write_row(run_dir: Path, row: ResultRow) -> Path:
    path = point_path(run_dir, row.key)
    atomic_write_text(path, row.model_dump_json(indent=2) + "\n")
    return path


def read_rows(run_dir: Path) -> tuple[list[ResultRow], list[tuple[Path, str]]]:
    """Every readable row of a run, and every unreadable file with why (never silently mixed)."""
    rows: list[ResultRow] = []
    bad: list[tuple[Path, str]] = []
    for path in sorted((Path(run_dir) / POINTS).glob("*.json")):
        try:
            rows.append(ResultRow.model_validate_json(path.read_bytes()))
        except (ValidationError, ValueError, OSError) as exc:
            bad.append((path, str(exc).splitlines()[0]))
    return rows, bad


def done_keys(run_dir: Path) -> set[str]:
    """Keys of points already measured `ok`: resume skips exactly these."""
    rows, _ = read_rows(run_dir)
    return {row.key for row in rows if row.status == "ok"}


def window_scores_path(run_dir: Path, group_label: str) -> Path:
    """Where a run keeps one group's per-window NLL sums (for paired tests between runs)."""
    digest = hashlib.sha256(group_label.encode()).hexdigest()[:16]
    return Path(run_dir) / "quality" / f"windows-{digest}.npz"


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    atomic_write_json(Path(run_dir) / MANIFEST, manifest)
