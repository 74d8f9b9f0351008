"""The files a point reads, by their content: what a point *is* includes them.

Beside its configuration a point reads files: its model's and its speculative draft's folders
where they are local folders (``model_folder_file``), its LoRA adapter's folder
(harness.spec.adapters), the scenario's task files (harness.tasks: scored on an offline point on
checkpoint weights), and what its mode reads (the mode's ``inputs`` part: a serving workload's
trace). Each is an ``InputFile``: what it is to the run (``model:<id>``, ``draft:<id>``,
``adapter:<label>``, ``task:<name>``, ``trace``), where it is, and the sha256 of its content (a
model folder: of its config.json and weight files; an adapter: of its weight files, as its
binding records; any other file: of its bytes). A point holds (what, first ``SHORT_HEX`` hex
digits) pairs (``Point.inputs``, part of its key: another content is another point); a run's
manifest records each file's path and hash (``record``); a resume into a run whose files
changed since is refused, naming the file and both hashes (``changed``), since its rows, and
the reference's stored outcomes the other groups are paired with, were measured on the old
content. Each group checks the task files it scores against the hashes it was planned with
(``check_planned``): a task file edited while a run goes fails the groups that come after.

A shipped task adds nothing: its file is checked against its pinned hash whenever it is read.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import UserInputError, quote
from harness.files import open_regular
from harness.spec import adapters, catalog
from harness.spec.labels import adapter_label
from harness.tasks.builtin import tasks_of
from harness.tasks.spec import TaskEntry, TaskFile, TaskSpec

SHORT_HEX = 16  # hex digits of a content hash in a key, a manifest and a message
HASH_CHUNK = 1 << 22
KINDS = {
    "adapter": "adapter folder (its weights)",
    "task": "task file",
    "trace": "trace",
    "model": "model folder (its config and weights)",
    "draft": "draft model folder (its config and weights)",
}


@dataclass(frozen=True)
class InputFile:
    """One file a point reads: what it is to the run, where it is, its content's sha256."""

    what: str
    path: str
    sha256: str

    @property
    def short(self) -> str:
        return self.sha256[:SHORT_HEX]


def pairs(files: Iterable[InputFile]) -> tuple[tuple[str, str], ...]:
    """What a point holds of its files (``Point.inputs``): (what, short hash) each."""
    return tuple((f.what, f.short) for f in files)


@functools.cache
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open_regular(path, "an input file") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a regular file's bytes (cached per file, size and mtime)."""
    resolved = Path(path).expanduser().resolve()
    try:
        status = resolved.stat()
    except OSError as exc:
        raise UserInputError(f"cannot be read ({exc.strerror})", file=str(path)) from None
    return _sha256_cached(str(resolved), status.st_size, status.st_mtime_ns)


def adapter_file(folder: str) -> InputFile:
    """An adapter folder by its weights' hash (the one its binding records and
    ``adapters.read_adapter`` checks)."""
    resolved = Path(folder).expanduser().resolve()
    found = adapters.weights_hash(resolved)
    if found is None:
        raise UserInputError(
            f"adapter folder {quote(folder)}: no weight files", field=adapters.FIELD
        )
    return InputFile(f"adapter:{adapter_label(folder)}", str(resolved), found)


def model_folder_file(kind: str, model_id: str) -> InputFile | None:
    """A model given as a local folder (not a catalog or shipped id: those are pinned, and a
    hub id is keyed by its revision), by its content: the sha256 over its config.json's hash
    and its weight files' (``adapters.weights_hash``); ``kind``: "model" or "draft". None for
    anything else."""
    if model_id in catalog.catalog_models():
        return None
    folder = Path(model_id).expanduser()
    config = folder / "config.json"
    if not config.is_file():
        return None
    digest = hashlib.sha256(b"config.json\0" + file_sha256(config).encode())
    digest.update(b"weights\0" + (adapters.weights_hash(folder) or "").encode())
    return InputFile(f"{kind}:{model_id}", str(folder.resolve()), digest.hexdigest())


def task_files(entries: Sequence[TaskEntry]) -> list[InputFile]:
    """A scenario's user task files (read strictly: ``tasks_of``), in its order."""
    specs = tasks_of(entries)
    return [
        InputFile(f"task:{spec.name}", str(Path(spec.source).resolve()), spec.sha256)
        for entry, spec in zip(entries, specs, strict=True)
        if isinstance(entry, TaskFile)
    ]


def check_planned(tasks: Sequence[TaskSpec], planned: Iterable[tuple[str, str]]) -> None:
    """Refuse a user's task file whose content is not the one the group was planned with
    (``planned``: its points' ``inputs`` pairs): edited while the run goes, it would be scored
    on other items than the groups before it. UserInputError naming the file and both hashes."""
    wanted = dict(planned)
    for task in tasks:
        then = wanted.get(f"task:{task.name}")
        if then is None or task.sha256[:SHORT_HEX] == then:
            continue
        raise UserInputError(
            f"task file of {quote(task.name)} changed since this run planned it: sha256 "
            f"{quote(then)} then, {quote(task.sha256[:SHORT_HEX])} now; the groups before this "
            "one were scored on the old content: restore the file, or start a new run",
            file=str(Path(task.source).resolve()),
        )


def mode_files(named: Iterable[tuple[str, Path]]) -> list[InputFile]:
    """The files a mode's ``inputs`` part names, (what, path) each, hashed."""
    return [InputFile(what, str(Path(p).resolve()), file_sha256(Path(p))) for what, p in named]


def record(files: Iterable[InputFile]) -> dict[str, dict[str, str]]:
    """What a run's manifest records of its files: what → {path, sha256 (short)}."""
    return {f.what: {"path": f.path, "sha256": f.short} for f in files}


def recorded(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]] | None:
    """The files the latest run entry that recorded any recorded (None: no entry recorded its
    files, an earlier harness's run)."""
    for entry in reversed(runs):
        found = entry.get("inputs")
        if isinstance(found, dict):
            return {str(k): v for k, v in found.items() if isinstance(v, dict)}
    return None


def changed(
    before: Mapping[str, Mapping[str, Any]] | None, now: Mapping[str, Mapping[str, str]]
) -> UserInputError | None:
    """Why a run that recorded ``before`` cannot be resumed with the files ``now`` (None: it
    can): a file whose content differs (its path, both hashes, how many more), or, when the run
    recorded no file, the first file it could not have checked."""
    if not now:
        return None
    if before is None:
        what, first = next(iter(now.items()))
        return UserInputError(
            f"{_kind(what)} of {quote(what)}: this run's earlier entries recorded no content "
            "hash of their input files (an earlier harness), so its rows cannot be checked "
            "against this file now; choose a new --out",
            file=first["path"],
        )
    moved = [w for w in now if w in before and before[w].get("sha256") != now[w]["sha256"]]
    if not moved:
        return None
    what = moved[0]
    more = f" (and {len(moved) - 1} more input(s))" if len(moved) > 1 else ""
    return UserInputError(
        f"{_kind(what)} of {quote(what)} changed since this run measured it: sha256 "
        f"{quote(str(before[what].get('sha256')), SHORT_HEX + 2)} then, "
        f"{quote(now[what]['sha256'])} now"
        f"{more}; its rows and the reference's stored outcomes were measured on the old content: "
        "choose a new --out, or restore the file",
        file=now[what]["path"],
    )


def _kind(what: str) -> str:
    return KINDS.get(what.partition(":")[0], "input file")
