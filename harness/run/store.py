"""Where results live, all of it: a run folder's layout, and reading and writing each part.

    results/<run>/points/<key>.json         one ResultRow per point (the key: Point.key)
    results/<run>/manifest.json             what ran, where and why (append-only history)
    results/<run>/quality/windows-<h>.npz   every group's per-window NLL (paired tests)
    results/<run>/quality/reference-<h>.npz a reference group's full scores (KL, top-1, ΔNLL)

Every write is atomic (harness.atomic), so a killed process leaves either the old file or the
new one, never half of one. Resume reads what is there.

Reading is as strict as the inputs: every file is read through ``harness.files`` (a regular file
only, capped: a FIFO or a link to a device is never opened); a row file over ``MAX_ROW_BYTES``, one
that is not a regular file, one that is not a ``ResultRow``, or one whose measured values are
non-finite, negative or out of range (see ``row_problem``) is unreadable, named with its cause; two
files holding the same point key are a conflict (UserInputError naming both), never a silent choice;
a manifest that is not JSON or not a harness manifest is refused with what to do.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from harness import corpus
from harness.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from harness.backends.base import WindowScores
from harness.errors import UserInputError
from harness.files import FileTooLarge, open_regular, read_capped
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


MAX_ROW_BYTES = 1 << 20  # a row is a few KiB
MAX_RATE = 1e9  # tokens per second: beyond any machine
MAX_MS = 1e9  # milliseconds (11.6 days)
MAX_MIB = 1e9  # MiB (about a PiB)
MAX_J = 1e12  # joules (a 1 MW cluster for 11.6 days)
MAX_W = 1e6  # watts of one device
# Measured figures that may be negative (differences); every other number must be ≥ 0.
SIGNED = {"weights_gap_pct", "peak_gap_pct", "dnll_vs_ref", "dnll_ci_low", "dnll_ci_high",
          "dnll_ci90_low", "dnll_ci90_high", "arc_diff", "arc_diff_ci90_low", "arc_diff_ci90_high",
          "train_peak_gap_pct", "train_alloc_gap_pct"}  # fmt: skip
# Figures with a tighter range than [0, +∞).
RANGES: dict[str, tuple[float, float]] = {
    "ppl": (1.0, math.inf),
    "ppl_ci_low": (1.0, math.inf),
    "ppl_ci_high": (1.0, math.inf),
    "top1_agree": (0.0, 1.0),
    "arc_acc": (0.0, 1.0),
    "arc_acc_norm": (0.0, 1.0),
    "arc_diff": (-1.0, 1.0),
    "arc_diff_ci90_low": (-1.0, 1.0),
    "arc_diff_ci90_high": (-1.0, 1.0),
    "slo_attainment": (0.0, 1.0),
    "slo_attainment_target": (0.0, 1.0),
    "concurrency": (1, math.inf),
    "batch": (1, math.inf),
    "context": (1, math.inf),
    "output_tokens": (1, math.inf),
}


# Training rows' lists (harness.row.Training): each value a finite number ≥ 0.
TRAINING_CURVES = ("loss_curve", "eval_curve", "eval_window_nll")


def upper_bound(name: str) -> float:
    if name.endswith(("_tok_s", "_rps")) or name in ("request_throughput", "request_rate"):
        return MAX_RATE
    if "_ms" in name:
        return MAX_MS
    if "mib" in name:
        return MAX_MIB
    if name.startswith("energy_j_") or name.startswith("j_per_"):
        return MAX_J
    if "_power_w" in name:
        return MAX_W
    return math.inf


def row_problem(row: ResultRow) -> str | None:
    """Why a parsed row cannot be trusted (a non-finite, negative or out-of-range figure)."""
    for name, value in row.model_dump(exclude={"provenance"}).items():
        if name in TRAINING_CURVES and value is not None:  # lists of losses: finite, ≥ 0
            flat = [v for item in value for v in (item if isinstance(item, list) else [item])]
            if not all(math.isfinite(v) and v >= 0 for v in flat):
                return f"{name} holds a value that is not a finite number ≥ 0"
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if name == "output_tokens" and row.mode == "training" and value == 0:
            continue  # a training point generates nothing
        if not math.isfinite(value):
            return f"{name} is {value} (not finite)"
        low, high = RANGES.get(name, (-math.inf if name in SIGNED else 0.0, upper_bound(name)))
        if not low <= value <= high:
            return f"{name} = {value:g} is outside [{low:g}, {high:g}]"
    load = row.provenance.load_average
    if load is not None and not (math.isfinite(load) and load >= 0):
        return f"provenance.load_average = {load} is not a finite number ≥ 0"
    return None


def validation_reason(exc: ValidationError) -> str:
    """The first problem of a row file in one line: field and cause (never the whole dump)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "row"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {err['msg']}{more}"


def read_row(path: Path) -> ResultRow | str:
    """A row, or why the file is unreadable."""
    try:
        row = ResultRow.model_validate_json(read_capped(path, MAX_ROW_BYTES, "row file"))
    except FileTooLarge as exc:
        size = f"{exc.size:,}" if exc.size is not None else f"more than {MAX_ROW_BYTES:,}"
        return f"{size} bytes; a row file is at most {MAX_ROW_BYTES:,}"
    except UserInputError as exc:  # not a regular file (a FIFO, a device)
        return exc.message
    except ValidationError as exc:
        return validation_reason(exc)
    except (ValueError, OSError) as exc:
        return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    return row_problem(row) or row


def read_rows(run_dir: Path) -> tuple[list[ResultRow], list[tuple[Path, str]]]:
    """Every readable row of a run, and every unreadable file with why (never silently mixed).
    Two files with the same point key are a conflict: UserInputError naming both."""
    rows: list[ResultRow] = []
    bad: list[tuple[Path, str]] = []
    where: dict[str, Path] = {}
    for path in sorted((Path(run_dir) / POINTS).glob("*.json")):
        got = read_row(path)
        if isinstance(got, str):
            bad.append((path, got))
            continue
        if got.key in where:
            raise UserInputError(
                f"two files hold point {got.key}: {where[got.key]} and {path}; "
                f"keep the one that belongs (its file name is {got.key}.json) and remove the other",
                file=str(run_dir),
            )
        where[got.key] = path
        rows.append(got)
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


def _arc_arrays(scores: WindowScores) -> dict[str, Any]:
    """The per-item ARC answers beside the window scores, when the group scored any."""
    if scores.arc_index is None or scores.arc_correct is None:
        return {}
    return {"arc_index": scores.arc_index, "arc_correct": scores.arc_correct}


def save_scores(path: Path, scores: WindowScores) -> None:
    """A reference's full scores, its ARC answers included (the paired per-item test)."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        nll_sum=scores.nll_sum,
        tokens=scores.tokens,
        argmax=scores.argmax,
        topk_ids=scores.topk_ids,
        topk_logprobs=scores.topk_logprobs,
        **_arc_arrays(scores),
    )
    atomic_write_bytes(path, buffer.getvalue())


def keep_scores(ctx: WorkContext, group: GroupKey, scores: WindowScores) -> None:
    """Every group's per-window NLL (paired tests across runs); a reference's full scores too
    (the other groups of its model are compared with them)."""
    buffer = io.BytesIO()
    np.savez(buffer, nll_sum=scores.nll_sum, tokens=scores.tokens, **_arc_arrays(scores))
    atomic_write_bytes(window_scores_path(Path(ctx.run_dir), group.label), buffer.getvalue())
    if is_reference(group, ctx):
        save_scores(reference_artifact(ctx, group), scores)


MAX_WINDOW_BYTES = 64 << 20  # a group's per-window NLL and ARC answers: a few MiB at most


def load_scores(path: Path) -> WindowScores | None:
    """A reference's full scores (streamed: the harness wrote them, and they may be large), or
    None when there is no regular file there (a FIFO or a device is never opened)."""
    if not path.exists():
        return None
    try:
        with open_regular(path, "reference scores") as handle, np.load(handle) as data:
            return _window_scores(data)
    except UserInputError:
        return None


def _window_scores(data: Any) -> WindowScores:
    arc = "arc_index" in data.files and "arc_correct" in data.files
    return WindowScores(
        nll_sum=data["nll_sum"],
        tokens=data["tokens"],
        argmax=data["argmax"],
        topk_ids=data["topk_ids"],
        topk_logprobs=data["topk_logprobs"],
        arc_index=data["arc_index"] if arc else None,
        arc_correct=data["arc_correct"] if arc else None,
    )


def _read_window_file(path: Path) -> bytes | None:
    """A window-scores file's bytes, or None when it is not there or not a regular file of at
    most ``MAX_WINDOW_BYTES``."""
    if not path.exists():
        return None
    try:
        return read_capped(path, MAX_WINDOW_BYTES, "window scores")
    except (OSError, UserInputError):
        return None


def load_window_nll(run_dir: Path, group_label: str) -> tuple[NDArray[Any], NDArray[Any]] | None:
    """A group's per-window (nll_sum, tokens) as a run kept them, or None when it did not."""
    raw = _read_window_file(window_scores_path(run_dir, group_label))
    if raw is None:
        return None
    try:
        with np.load(io.BytesIO(raw)) as data:
            return np.asarray(data["nll_sum"], float), np.asarray(data["tokens"], float)
    except (OSError, KeyError, ValueError):
        return None


def load_window_arc(run_dir: Path, group_label: str) -> tuple[NDArray[Any], NDArray[Any]] | None:
    """A group's ARC answers as the run kept them beside its window scores: (item indices [N],
    hits [N, 2]: acc, acc_norm), or None when it kept none (no ARC items, an older run)."""
    raw = _read_window_file(window_scores_path(run_dir, group_label))
    if raw is None:
        return None
    try:
        with np.load(io.BytesIO(raw)) as data:
            if "arc_index" not in data.files or "arc_correct" not in data.files:
                return None
            index = np.asarray(data["arc_index"], dtype=np.int64)
            hits = np.asarray(data["arc_correct"], dtype=bool)
    except (OSError, KeyError, ValueError):
        return None
    if index.ndim != 1 or hits.shape != (index.size, 2):
        return None
    return index, hits


MAX_MANIFEST_BYTES = 64 << 20


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """The run's manifest ({} when there is none); one that is not a harness manifest is refused
    (UserInputError saying what to do) rather than overwritten or half-read."""
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        return {}
    todo = "move it away (or choose another --out) and run again"
    try:
        data = json.loads(read_capped(path, MAX_MANIFEST_BYTES, "manifest"))
    except FileTooLarge:
        raise UserInputError(
            f"larger than {MAX_MANIFEST_BYTES:,} bytes: not a harness manifest; {todo}",
            file=str(path),
        ) from None
    except UserInputError as exc:  # not a regular file (a FIFO, a device): never read
        raise UserInputError(f"{exc.message}; {todo}", file=str(path)) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        cause = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise UserInputError(f"unreadable manifest ({cause}); {todo}", file=str(path)) from None
    runs = data.get("runs") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or not isinstance(runs, list)
        or not all(isinstance(r, dict) for r in runs)
        or not isinstance(data.get("name", ""), str)
    ):
        raise UserInputError(
            f"not a harness manifest (expected an object with a list of runs); {todo}",
            file=str(path),
        )
    return data


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    atomic_write_json(Path(run_dir) / MANIFEST, manifest)
