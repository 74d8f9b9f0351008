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

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import io
import json
import math
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from harness import corpus, modes
from harness.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from harness.backends.base import WindowScores
from harness.console import err_console
from harness.errors import IN_A_NAME, UserInputError, quote, without_controls
from harness.files import FileTooLarge, JsonRefused, open_regular, read_capped, strict_json
from harness.row import SCHEMA_VERSION, ResultRow
from harness.run.contracts import WorkContext, is_reference
from harness.spec.scenario import GroupKey
from harness.tasks import metrics as task_metrics
from harness.tasks.arc import NAME as ARC_NAME
from harness.tasks.arc import arc_task
from harness.tasks.kinds.base import item_outcome

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
          "dnll_ci90_low", "dnll_ci90_high", "train_peak_gap_pct",
          "train_alloc_gap_pct"}  # fmt: skip
# Figures with a tighter range than [0, +∞).
RANGES: dict[str, tuple[float, float]] = {
    "ppl": (1.0, math.inf),
    "ppl_ci_low": (1.0, math.inf),
    "ppl_ci_high": (1.0, math.inf),
    "top1_agree": (0.0, 1.0),
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
    """Why a parsed row cannot be trusted (a mode this harness does not know; a non-finite,
    negative or out-of-range figure)."""
    if row.mode not in modes.REGISTRY:
        return f"mode: {row.mode!r} is not a mode; expected one of: {', '.join(modes.REGISTRY)}"
    for name, value in row.model_dump(exclude={"provenance"}).items():
        if name == "tasks" and value is not None:
            problem = tasks_problem(value)
            if problem:
                return problem
            continue
        if name in TRAINING_CURVES and value is not None:  # lists of losses: finite, ≥ 0
            flat = [v for item in value for v in (item if isinstance(item, list) else [item])]
            if not all(math.isfinite(v) and v >= 0 for v in flat):
                return f"{name} holds a value that is not a finite number ≥ 0"
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if name == "output_tokens" and value == 0 and not modes.get(row.mode).facts.generates:
            continue  # a point of a mode that generates nothing (training)
        if not math.isfinite(value):
            return f"{name} is {value} (not finite)"
        low, high = RANGES.get(name, (-math.inf if name in SIGNED else 0.0, upper_bound(name)))
        if not low <= value <= high:
            return f"{name} = {value:g} is outside [{low:g}, {high:g}]"
    load = row.provenance.load_average
    if load is not None and not (math.isfinite(load) and load >= 0):
        return f"provenance.load_average = {load} is not a finite number ≥ 0"
    return None


TASK_COUNTS = ("items", "units", "paired_units", "confusion")  # counts ≥ 0; the rest shares
# longctx: the gold answers' NLL and its paired change (nats/token): finite, not shares
TASK_NATS = ("answer_nll", "dnll", "dnll_ci90_low", "dnll_ci90_high", "dnll_sd")


def tasks_problem(value: Any, where: str = "tasks") -> str | None:
    """Why a row's ``tasks`` part cannot be trusted: a count below 0, or a share (a score, a
    rate, a drop and its bounds) that is not finite or outside [-1, 1]."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = tasks_problem(item, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if key in TASK_COUNTS:
                flat = item if isinstance(item, list) else [item]
                cells = [c for x in flat for c in (x if isinstance(x, list) else [x])]
                if any(c is not None and c < 0 for c in cells):
                    return f"{where}.{key} holds a count below 0"
                continue
            if key in TASK_NATS:
                if isinstance(item, float) and not math.isfinite(item):
                    return f"{where}.{key} is {item} (not finite)"
                continue
            found = tasks_problem(item, f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(value, float) and not (math.isfinite(value) and -1.0 <= value <= 1.0):
        return f"{where} = {value:g} is not a share in [-1, 1]"
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


def _task_arrays(data: Any) -> dict[str, Any] | None:
    """The task arrays of a loaded scores file (None: it has none); a file of a run before ARC
    was scored as a task gives its ARC answers as ``arc-easy``'s (``legacy_arc_arrays``)."""
    found = {k: np.asarray(data[k]) for k in data.files if k.startswith(task_metrics.PREFIX)}
    if "arc_index" in data.files and "arc_correct" in data.files:
        found = {**legacy_arc_arrays(data["arc_index"], data["arc_correct"]), **found}
    return found or None


def legacy_arc_arrays(index: NDArray[Any], hits: NDArray[Any]) -> dict[str, Any]:
    """An earlier run's ARC answers (item indices in the ARC file [N]; hits [N, 2]: the plain
    and the length-normalised pick right) as the ``arc-easy`` task's arrays, the arrays that run
    did not keep left empty (the prediction of a wrong answer: "?"); {} when malformed."""
    index, hits = np.asarray(index), np.asarray(hits)
    if index.ndim != 1 or hits.shape != (index.size, 2) or index.dtype.kind not in "iu":
        return {}
    arc = arc_task(None)
    if index.size and (index.min() < 0 or index.max() >= len(arc.scored)):
        return {}
    task = dataclasses.replace(arc, scored=tuple(arc.scored[i] for i in index.tolist()))
    gold = [str(item.gold) for item in task.scored]
    correct = hits[:, 0].astype(bool).tolist()
    predicted = [g if right else "?" for g, right in zip(gold, correct, strict=True)]
    made = item_outcome("choice", task, correct, predicted, gold)
    outcome = dataclasses.replace(made, correct_norm=hits[:, 1].astype(bool))
    return task_metrics.to_arrays(ARC_NAME, outcome)


def _task_results(scores: WindowScores) -> dict[str, Any]:
    """The group's per-item task arrays ({} when it scored no task)."""
    return dict(scores.task_arrays or {})


def save_scores(path: Path, scores: WindowScores) -> None:
    """A reference's full scores, its task results included (the paired per-item tests)."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        nll_sum=scores.nll_sum,
        tokens=scores.tokens,
        argmax=scores.argmax,
        topk_ids=scores.topk_ids,
        topk_logprobs=scores.topk_logprobs,
        **_task_results(scores),
    )
    atomic_write_bytes(path, buffer.getvalue())


def keep_scores(ctx: WorkContext, group: GroupKey, scores: WindowScores) -> None:
    """Every group's per-window NLL (paired tests across runs); a reference's full scores too
    (the other groups of its model are compared with them)."""
    buffer = io.BytesIO()
    np.savez(buffer, nll_sum=scores.nll_sum, tokens=scores.tokens, **_task_results(scores))
    atomic_write_bytes(window_scores_path(Path(ctx.run_dir), group.label), buffer.getvalue())
    if is_reference(group, ctx):
        save_scores(reference_artifact(ctx, group), scores)


MAX_WINDOW_BYTES = 64 << 20  # a group's per-window NLL and task results: a few MiB at most


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
    return WindowScores(
        nll_sum=data["nll_sum"],
        tokens=data["tokens"],
        argmax=data["argmax"],
        topk_ids=data["topk_ids"],
        topk_logprobs=data["topk_logprobs"],
        task_arrays=_task_arrays(data),
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


def load_window_tasks(run_dir: Path, group_label: str) -> dict[str, Any] | None:
    """A group's task arrays as the run kept them beside its window scores (names
    ``task__<task>__<array>``; harness.tasks.metrics.from_arrays reads them), or None."""
    raw = _read_window_file(window_scores_path(run_dir, group_label))
    if raw is None:
        return None
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as data:
            return _task_arrays(data)
    except (OSError, KeyError, ValueError):
        return None


MAX_MANIFEST_BYTES = 64 << 20


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """The run's manifest ({} when there is none); one that is not a harness manifest is refused
    (UserInputError saying what to do) rather than overwritten or half-read."""
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        return {}
    todo = "move it away (or choose another --out) and run again"
    try:
        data = strict_json(read_capped(path, MAX_MANIFEST_BYTES, "manifest"))
    except FileTooLarge:
        raise UserInputError(
            f"larger than {MAX_MANIFEST_BYTES:,} bytes: not a harness manifest; {todo}",
            file=str(path),
        ) from None
    except UserInputError as exc:  # not a regular file (a FIFO, a device): never read
        raise UserInputError(f"{exc.message}; {todo}", file=str(path)) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        cause = (
            exc.msg
            if isinstance(exc, json.JSONDecodeError)
            else str(exc)
            if isinstance(exc, JsonRefused)
            else type(exc).__name__
        )
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


def refuse_newer_schema(manifest: dict[str, Any], run_dir: Path) -> None:
    """A manifest whose runs wrote rows of a newer result schema than this harness writes: a
    resume would mix two schemas in one folder (UserInputError naming both versions)."""
    for entry in manifest.get("runs") or []:
        claim = entry.get("schema_version", 1)
        if isinstance(claim, bool) or not isinstance(claim, int) or claim > SCHEMA_VERSION:
            raise UserInputError(
                f"its runs wrote result schema version {quote(claim)}; this harness writes "
                f"version {SCHEMA_VERSION}: resume it with the harness that wrote it, or choose "
                "a new --out",
                file=str(Path(run_dir) / MANIFEST),
            )


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    atomic_write_json(Path(run_dir) / MANIFEST, manifest)


# --- one writer per run folder ---------------------------------------------------------------

LOCK = ".harness.lock"  # in the run folder while a command holds it: its pid, host, command
MAX_LOCK_BYTES = 4096
# The locks this process holds: a nested take of the same folder (report inside a command that
# aggregated under the lock) counts up instead of refusing itself.
_HELD: dict[str, list[int]] = {}


def lock_path(folder: Path) -> Path:
    return Path(folder) / LOCK


def _holder(fd: int) -> dict[str, Any]:
    """What the lock file records (pid, host, command, since), {} when nothing readable."""
    try:
        data = json.loads(os.pread(fd, MAX_LOCK_BYTES, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _pid_alive(pid: object) -> bool:
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or a pid no process can have (10**30)
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _stale(holder: dict[str, Any]) -> bool:
    """A holder recorded on this host whose process is gone."""
    return holder.get("host") == socket.gethostname() and not _pid_alive(holder.get("pid"))


def _plain(value: object) -> str:
    """A value the lock file records, as a message shows it: 40 characters, no control ones."""
    return without_controls(str(value)[:40], IN_A_NAME)


def _who(holder: dict[str, Any]) -> str:
    if not holder:
        return "another harness process (it has not written its pid yet)"
    get = holder.get
    return (
        f"`harness {_plain(get('command', '?'))}`, pid {_plain(get('pid', '?'))} on host "
        f"{_plain(get('host', '?'))} since {_plain(get('since', '?'))}"
    )


def _open_lock(path: Path) -> int:
    """The lock file open for reading and writing (made when missing); never through a symlink,
    never anything but a regular file."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise UserInputError(
                "the run lock is a folder, not a file; remove it", file=str(path)
            ) from None
        if exc.errno != errno.ELOOP:
            raise
        raise UserInputError("the run lock is a symlink; remove it", file=str(path)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserInputError("the run lock is not a regular file; remove it", file=str(path))
    return fd


def _same_file(path: Path, fd: int) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _take(path: Path, folder: Path) -> tuple[int, str | None]:
    """The lock taken (its descriptor) and, when a dead process's lock was taken over, a line
    saying so. A live holder: UserInputError naming its pid and host."""
    told: str | None = None
    for _ in range(5):  # a lock file replaced under us (a stale one taken over) is opened again
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            if holder and _stale(holder) and _same_file(path, fd):
                # held by no live harness (a child that inherited it, a lock on a shared disk)
                told = f"took over the lock of {_who(holder)}, which is no longer running"
                path.unlink(missing_ok=True)
                os.close(fd)
                continue
            os.close(fd)
            raise UserInputError(
                f"in use by {_who(holder)}: one harness command writes a run folder at a time; "
                "wait for it to end or choose another --out",
                file=str(folder),
            ) from None
        if not _same_file(path, fd):
            os.close(fd)
            continue
        previous = _holder(fd)
        if previous and told is None:  # a holder that ended without clearing it: it died
            told = f"took over the lock of {_who(previous)}, which ended without releasing it"
        return fd, told
    raise UserInputError("the run lock keeps changing; try again", file=str(folder))


@contextlib.contextmanager
def run_lock(
    folder: Path,
    command: str,
    *,
    lock: Path | None = None,
    create: bool = True,
    writes: bool = True,
) -> Iterator[None]:
    """Hold `folder`'s lock (``fcntl.flock`` on ``folder/.harness.lock``, or on `lock`) while
    the block runs: a second harness command on the folder is refused in one line naming the
    holder's pid and host (UserInputError, exit 2). The kernel releases a lock whose process
    died; a lock file still naming such a process is taken over, and the user is told. The
    same process may take a lock it holds again (nested commands). Without `create`, a folder
    that is not there is not made (nothing to lock: its reader says it is missing). A command
    that writes nothing (``writes=False``: aggregate) reads a folder it may not write (a
    read-only archive) without the lock."""
    folder = Path(folder)
    path = Path(lock) if lock is not None else lock_path(folder)
    if not create and not path.parent.is_dir():
        yield
        return
    made = not path.parent.exists()  # a folder made only for the lock is removed with it
    path.parent.mkdir(parents=True, exist_ok=True)
    key = str(path.parent.resolve() / path.name)  # the lock itself is never followed
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield
        finally:
            _HELD[key][1] -= 1
        return
    try:
        fd, told = _take(path, folder)
    except OSError as exc:
        if writes or exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        yield  # nothing to protect from a reader that cannot write here
        return
    try:
        if told:
            err_console.print(f"[bold yellow]note[/]: {path}: {told}", highlight=False)
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": command,
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        _HELD[key] = [fd, 1]
        yield
    finally:
        _HELD.pop(key, None)
        with contextlib.suppress(OSError):
            if _same_file(path, fd):  # removed while still held: a clean release leaves nothing
                path.unlink()
            if made and not any(path.parent.iterdir()):  # made only for the lock (refused)
                path.parent.rmdir()
        os.close(fd)
