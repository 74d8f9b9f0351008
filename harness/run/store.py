"""Where results live, all of it: a run folder's layout, and reading and writing each part.

    results/<run>/points/<key>.json         one ResultRow per point (the key: Point.key)
    results/<run>/manifest.json             what ran, where and why (append-only history)
    results/<run>/quality/windows-<h>.npz   every group's per-window NLL (paired tests)
    results/<run>/quality/reference-<h>.npz a reference group's full scores (KL, top-1, ΔNLL)

Every write is atomic (harness.atomic), so a killed process leaves either the old file or the
new one, never half of one. Resume reads what is there.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from harness import corpus
from harness.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from harness.backends.base import WindowScores
from harness.row import ResultRow
from harness.run.contracts import WorkContext, is_reference
from harness.spec.scenario import GroupKey

POINTS = "points"
MANIFEST = "manifest.json"


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


def reference_artifact(ctx: WorkContext, group: GroupKey) -> Path:
    """The reference's per-window scores, per model + target + corpus + window settings."""
    ident = f"{group.model}|{group.revision}|{group.target}|{corpus.corpus_hash()}|" + (
        f"{ctx.quality.window_tokens}|{ctx.quality.max_windows}"
    )
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    return Path(ctx.run_dir) / "quality" / f"reference-{digest}.npz"


def save_scores(path: Path, scores: WindowScores) -> None:
    buffer = io.BytesIO()
    np.savez(
        buffer,
        nll_sum=scores.nll_sum,
        tokens=scores.tokens,
        argmax=scores.argmax,
        topk_ids=scores.topk_ids,
        topk_logprobs=scores.topk_logprobs,
    )
    atomic_write_bytes(path, buffer.getvalue())


def keep_scores(ctx: WorkContext, group: GroupKey, scores: WindowScores) -> None:
    """Every group's per-window NLL (paired tests across runs); a reference's full scores too
    (the other groups of its model are compared with them)."""
    buffer = io.BytesIO()
    np.savez(buffer, nll_sum=scores.nll_sum, tokens=scores.tokens)
    atomic_write_bytes(window_scores_path(Path(ctx.run_dir), group.label), buffer.getvalue())
    if is_reference(group, ctx):
        save_scores(reference_artifact(ctx, group), scores)


def load_scores(path: Path) -> WindowScores | None:
    if not path.is_file():
        return None
    with np.load(path) as data:
        return WindowScores(
            nll_sum=data["nll_sum"],
            tokens=data["tokens"],
            argmax=data["argmax"],
            topk_ids=data["topk_ids"],
            topk_logprobs=data["topk_logprobs"],
        )


def load_window_nll(run_dir: Path, group_label: str) -> tuple[NDArray[Any], NDArray[Any]] | None:
    """A group's per-window (nll_sum, tokens) as a run kept them, or None when it did not."""
    path = window_scores_path(run_dir, group_label)
    if not path.is_file():
        return None
    try:
        with np.load(path) as data:
            return np.asarray(data["nll_sum"], float), np.asarray(data["tokens"], float)
    except (OSError, KeyError, ValueError):
        return None


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    atomic_write_json(Path(run_dir) / MANIFEST, manifest)
