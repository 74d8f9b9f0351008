"""Where a model's files are: one resolver for plan, pull, worker, backends and provenance.

A model is a shipped model (``tiny-llama``, in ``harness/data``; or the architecture facts of a
real model, config.json only, in ``harness/spec/catalog/configs``: ``qwen2.5-0.5b``, … — these
run on random weights only), a local directory holding a config.json, or a Hugging Face hub id
``org/name`` at a revision (branch, tag or commit). Hub ids are looked up in the Hugging Face
cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``; the hub's own
``models--org--name/refs/<rev>`` + ``snapshots/<sha>`` layout, read with huggingface_hub) and,
unless ``HF_HUB_OFFLINE`` is set, fetched with huggingface_hub (resumable, progress bar;
``HF_TOKEN`` for gated models).

Planning needs config.json only (``need="config"``); measuring needs the tokenizer and the
weights (``need="weights"``). Weights are safetensors unless a scenario opts in to pickled
checkpoints for that model (``allow_pickle``), and a config that names its own code
(``auto_map``) is refused unless the scenario opts in (``trust_remote_code``). Every refusal is a
UserInputError: one line saying which model, why, and what to do.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from harness.errors import UserInputError, quote
from harness.files import read_capped

PACKAGE_DATA = Path(__file__).resolve().parents[1] / "data"
CATALOG_CONFIGS = Path(__file__).resolve().parent / "catalog" / "configs"  # config.json only

Need = Literal["config", "weights"]
Source = Literal["shipped", "local", "hub"]

CONFIG = "config.json"
MAX_CONFIG_BYTES = 1 << 22  # 4 MiB: the largest configs on the hub are tens of KiB
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "generation_config.json",
)
SAFETENSORS = ("*.safetensors", "*.safetensors.index.json")
PICKLED = ("*.bin", "*.bin.index.json", "*.pt", "*.pth")
REMOTE_CODE = ("*.py",)
FIELD = "models.id"


def truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def offline() -> bool:
    """Whether the hub may not be contacted (read at each call, unlike huggingface_hub's)."""
    return truthy(os.environ.get("HF_HUB_OFFLINE")) or truthy(
        os.environ.get("TRANSFORMERS_OFFLINE")
    )


def cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment at each call."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return Path(os.environ[name]).expanduser()
    home = os.environ.get("HF_HOME") or str(
        Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "huggingface"
    )
    return Path(home).expanduser() / "hub"


def is_hub_id(model_id: str) -> bool:
    """`org/name` as the hub spells a repository id (huggingface_hub's own rule)."""
    parts = model_id.split("/")
    if not (len(parts) == 2 and all(parts) and not model_id.startswith((".", "~", "/"))):
        return False
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils._validators import validate_repo_id

    try:
        validate_repo_id(model_id)
    except HFValidationError:
        return False
    return True


def patterns(
    need: Need, *, allow_pickle: bool = False, trust_remote_code: bool = False
) -> list[str]:
    """The files of a repository that a need takes."""
    if need == "config":
        return [CONFIG]
    wanted = [CONFIG, *TOKENIZER_FILES, *SAFETENSORS]
    if allow_pickle:
        wanted += PICKLED
    if trust_remote_code:
        wanted += REMOTE_CODE
    return wanted


def matches(name: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(name, g) for g in globs)


@dataclass(frozen=True)
class ResolvedModel:
    """A model's files on this machine."""

    id: str
    revision: str
    path: Path  # the directory holding config.json (a hub snapshot, a local or shipped folder)
    source: Source
    commit: str | None = None  # the hub snapshot's commit SHA; None for local folders
    files: tuple[str, ...] = field(default=())

    @property
    def has_config(self) -> bool:
        return CONFIG in self.files

    @property
    def has_tokenizer(self) -> bool:
        return (
            "tokenizer.json" in self.files
            or "tokenizer.model" in self.files
            or ("vocab.json" in self.files and "merges.txt" in self.files)
        )

    @property
    def has_safetensors(self) -> bool:
        return any(matches(f, ("*.safetensors",)) for f in self.files)

    @property
    def has_pickled(self) -> bool:
        return any(matches(f, ("*.bin", "*.pt", "*.pth")) for f in self.files)

    def config(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(read_config(self.path / CONFIG))
        return loaded


def read_config(path: Path) -> bytes:
    """A config.json's bytes: a regular file of at most ``MAX_CONFIG_BYTES`` (never a FIFO or a
    device, which would hang or never end), or a UserInputError naming it in its message (the
    scenario's validator puts its own file and line in front)."""
    try:
        return read_capped(path, MAX_CONFIG_BYTES, str(path))
    except UserInputError as exc:
        raise UserInputError(exc.message) from None


def listing(path: Path) -> tuple[str, ...]:
    return tuple(sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()))


def pull_hint(model_id: str) -> str:
    return "run `harness pull SCENARIO` with the hub reachable (HF_HUB_OFFLINE unset)"


def shipped_dir(model_id: str) -> Path | None:
    """The folder of a shipped model or shipped architecture (config.json only), by short id."""
    if "/" in model_id or model_id in {"", ".", ".."}:
        return None
    for root in (PACKAGE_DATA, CATALOG_CONFIGS):
        if (root / model_id / CONFIG).is_file():
            return root / model_id
    return None


def resolve(
    model_id: str,
    revision: str = "main",
    *,
    need: Need = "weights",
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    progress: bool = True,
) -> ResolvedModel:
    """The model's files on this machine, fetched from the hub first when allowed and missing."""
    shipped = shipped_dir(model_id)
    if shipped is None:
        refuse_symlink_loop(model_id)
    if shipped is not None:
        found = ResolvedModel(model_id, revision, shipped, "shipped", files=listing(shipped))
    elif (Path(model_id).expanduser() / CONFIG).exists():
        local = Path(model_id).expanduser().resolve()
        if not (local / CONFIG).is_file():
            read_config(local / CONFIG)  # a FIFO or a device: refused, naming it
        found = ResolvedModel(model_id, revision, local, "local", files=listing(local))
    elif is_hub_id(model_id):
        found = _hub(model_id, revision, need, allow_pickle, trust_remote_code, progress)
    else:
        raise UserInputError(
            f"model {quote(model_id)}: not a shipped model, not a directory with config.json and "
            "not a hub id 'org/name'; give one of those",
            field=FIELD,
        )
    check(found, need, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code)
    return found


def refuse_symlink_loop(model_id: str) -> None:
    """A model path that is, or passes through, a symlink loop, or whose config.json is one
    (``Path.exists`` says only "missing"): one line saying so."""
    folder = Path(model_id).expanduser()
    for path in (folder, folder / CONFIG):
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                continue
            raise UserInputError(
                f"model {quote(model_id)}: {quote(str(path), 80)} is or passes through a symlink "
                "loop (links that lead back to themselves); point the model at a folder holding "
                "config.json",
                field=FIELD,
            ) from None


def check(
    found: ResolvedModel, need: Need, *, allow_pickle: bool = False, trust_remote_code: bool = False
) -> None:
    """Refuse what cannot be planned or measured, in one line."""
    label = f"model {quote(found.id)}" + (
        f" (revision {quote(found.revision)})" if found.source == "hub" else ""
    )
    where = f"{found.path}"
    if not found.has_config:
        raise UserInputError(f"{label}: no config.json in {where}", field=FIELD)
    if need == "config":
        return
    if "auto_map" in found.config() and not trust_remote_code:
        raise UserInputError(
            f"{label}: its config.json names its own code (auto_map), which the harness runs only "
            "when the scenario opts in: set `trust_remote_code: true` on this model",
            field=FIELD,
        )
    if not found.has_tokenizer:
        raise UserInputError(
            f"{label}: no tokenizer files (tokenizer.json, tokenizer.model or vocab.json + "
            f"merges.txt) in {where}; "
            + (pull_hint(found.id) if found.source == "hub" else "add them")
            + ", or measure speed and memory only with `weights: random` on this model",
            field=FIELD,
        )
    if not found.has_safetensors:
        if found.has_pickled and not allow_pickle:
            raise UserInputError(
                f"{label}: the repository has no safetensors weights, only pickled ones "
                "(.bin/.pt), which can run code when loaded: convert them to safetensors, or set "
                "`allow_pickle: true` on this model in the scenario",
                field=FIELD,
            )
        if not found.has_pickled:
            raise UserInputError(
                f"{label}: no weights (*.safetensors) in {where}; "
                + (pull_hint(found.id) if found.source == "hub" else "add them")
                + ", or measure speed and memory only with `weights: random` on this model",
                field=FIELD,
            )


# --- the hub ---------------------------------------------------------------------------------


def cached_snapshot(model_id: str, revision: str) -> Path | None:
    """The cached snapshot folder of a revision (a branch/tag via refs/, or a commit), or None."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(
            snapshot_download(
                model_id, revision=revision, cache_dir=cache_dir(), local_files_only=True
            )
        )
    except (LocalEntryNotFoundError, FileNotFoundError, OSError):
        return None


def repo_folder(model_id: str) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return cache_dir() / repo_folder_name(repo_id=model_id, repo_type="model")


def cached_revisions(model_id: str) -> list[str]:
    refs = repo_folder(model_id) / "refs"
    snapshots = repo_folder(model_id) / "snapshots"
    names = [p.name for p in refs.iterdir()] if refs.is_dir() else []
    names += [p.name[:12] for p in snapshots.iterdir()] if snapshots.is_dir() else []
    return names


def missing_offline(
    model_id: str, revision: str, need: Need, snapshot: Path | None
) -> UserInputError:
    label = f"model {quote(model_id)} (revision {quote(revision)})"
    what = "config.json" if need == "config" else "its files"
    if snapshot is None and repo_folder(model_id).is_dir():
        known = ", ".join(cached_revisions(model_id)) or "none"
        return UserInputError(
            f"{label}: revision not in the Hugging Face cache at {cache_dir()} (cached: {known}) "
            f"and HF_HUB_OFFLINE is set: fix the revision, or {pull_hint(model_id)}",
            field=FIELD,
        )
    return UserInputError(
        f"{label}: {what} not in the Hugging Face cache at {cache_dir()} and HF_HUB_OFFLINE is "
        f"set: {pull_hint(model_id)}",
        field=FIELD,
    )


def complete(snapshot: Path, need: Need) -> bool:
    files = listing(snapshot)
    if CONFIG not in files:
        return False
    if need == "config":
        return True
    return any(matches(f, ("*.safetensors", "*.bin", "*.pt", "*.pth")) for f in files) and any(
        f in files for f in ("tokenizer.json", "tokenizer.model", "vocab.json")
    )


def _hub(
    model_id: str,
    revision: str,
    need: Need,
    allow_pickle: bool,
    trust_remote_code: bool,
    progress: bool,
) -> ResolvedModel:
    snapshot = cached_snapshot(model_id, revision)
    if snapshot is None or not complete(snapshot, need):
        if offline():
            raise missing_offline(model_id, revision, need, snapshot)
        snapshot = download(
            model_id,
            revision,
            patterns(need, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code),
            progress=progress,
        )
    return ResolvedModel(
        model_id, revision, snapshot, "hub", commit=snapshot.name, files=listing(snapshot)
    )


def hub_error(model_id: str, revision: str, exc: Exception) -> UserInputError:
    """A refusal by the hub (or no hub at all) as one line: which model, why, what to do."""
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    label = f"model {quote(model_id)} (revision {quote(revision)})"
    if isinstance(exc, GatedRepoError):
        why = (
            f"gated on the hub: accept its licence at https://huggingface.co/{model_id} and set "
            "HF_TOKEN to a token of that account"
        )
    elif isinstance(exc, RevisionNotFoundError):
        why = f"the hub has no revision {quote(revision)}: give a branch, tag or commit that exists"
    elif isinstance(exc, RepositoryNotFoundError):
        why = "no such repository on the hub (or it is private: set HF_TOKEN): check the id"
    elif isinstance(exc, LocalEntryNotFoundError):
        why = f"the hub is unreachable and the files are not cached at {cache_dir()}: " + pull_hint(
            model_id
        )
    else:
        first = str(exc).splitlines()[0] if str(exc) else ""
        why = f"download failed ({type(exc).__name__}: {first}); check the id and the network"
    return UserInputError(f"{label}: {why}", field=FIELD)


def download(model_id: str, revision: str, allow: list[str], *, progress: bool = True) -> Path:
    """Fetch the files matching `allow` into the cache (resumable; skips what is cached)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import (  # type: ignore[attr-defined]
        disable_progress_bars,
        enable_progress_bars,
    )

    if not progress:
        disable_progress_bars()
    try:
        return Path(
            snapshot_download(
                model_id,
                revision=revision,
                cache_dir=cache_dir(),
                allow_patterns=allow,
                token=os.environ.get("HF_TOKEN") or None,
            )
        )
    except Exception as exc:  # every hub refusal becomes one line
        raise hub_error(model_id, revision, exc) from None
    finally:
        if not progress:
            enable_progress_bars()


@dataclass(frozen=True)
class RemoteFile:
    name: str
    size: int | None
    cached: bool


def remote_files(model_id: str, revision: str, allow: list[str]) -> tuple[str, list[RemoteFile]]:
    """What a download would fetch (commit, files with sizes and whether cached); needs the hub."""
    from huggingface_hub import snapshot_download

    try:
        infos = snapshot_download(
            model_id,
            revision=revision,
            cache_dir=cache_dir(),
            allow_patterns=allow,
            token=os.environ.get("HF_TOKEN") or None,
            dry_run=True,
        )
    except Exception as exc:
        raise hub_error(model_id, revision, exc) from None
    commit = infos[0].commit_hash if infos else ""
    return commit, [RemoteFile(i.filename, i.file_size, i.is_cached) for i in infos]


@cache
def _hub_config(
    model_id: str, revision: str, cache: str, offline_now: bool
) -> tuple[str, dict[str, Any]]:
    found = resolve(model_id, revision, need="config")
    return str(found.path / CONFIG), found.config()


def hub_config_file(model_id: str, revision: str = "main") -> tuple[str, dict[str, Any]]:
    """(the file, its content) of a hub id's config.json at `revision` (cached per id,
    revision, cache folder and offline mode: two revisions are two configs)."""
    return _hub_config(model_id, revision, str(cache_dir()), offline())


def hub_config(model_id: str, revision: str = "main") -> dict[str, Any]:
    """config.json of a hub id at `revision` (``hub_config_file``)."""
    return hub_config_file(model_id, revision)[1]
