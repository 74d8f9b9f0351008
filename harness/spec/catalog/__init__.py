"""GPU specs and model architectures, read from the YAML data files beside this module.

A model is a catalog id or a local directory holding a config.json; both go through
`arch_from_config`, so the catalog and real checkpoints share one parser.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from harness.errors import UserInputError, did_you_mean
from harness.spec import models as resolver

HERE = Path(__file__).parent
PACKAGE_DATA = HERE.parents[1] / "data"

Vendor = Literal["nvidia", "amd", "cpu"]
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class GpuSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    vendor: Vendor
    memory_gib: float
    bandwidth_gb_s: float
    bf16_tflops: float
    fp8_tflops: float | None
    aliases: tuple[str, ...] = ()
    source: str


# The linears of a decoder layer's MLP: one copy per expert on a mixture of experts.
MLP_LINEARS = ("gate_proj", "up_proj", "down_proj")


class ModelArch(BaseModel):
    """The facts of a config.json that memory and roofline need."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_positions: int
    tie_embeddings: bool
    dtype: str
    sliding_window: int | None = None
    sliding_layers: int = 0
    num_experts: int = 1
    experts_per_token: int = 1
    attention_bias: bool = False
    path: str | None = None  # a local directory with weights, when there is one

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each linear of one decoder layer (Llama-style names);
        the MLP's three count once per expert on a mixture of experts (see `MLP_LINEARS`)."""
        h, hd, i = self.hidden_size, self.head_dim, self.intermediate_size
        q, kv = self.num_heads * hd, self.num_kv_heads * hd
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        """Bytes of K and V for one token across all layers (before any sliding-window cap)."""
        return kv_bytes_per_token(
            num_layers=self.num_layers,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            bytes_per_element=bytes_per_element,
        )


def kv_bytes_per_token(
    *, num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_element: float
) -> float:
    """Bytes of K and V for one token across all layers: 2 × layers × kv_heads × head_dim × bytes.

    The one home of this fact: the planner reads it from a ModelArch, the vLLM backend from the
    engine's own model config (its KV block = this × tokens per block).
    """
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_element


# Architecture facts a config.json must give, each a positive whole number.
REQUIRED_CONFIG_KEYS = (
    "num_attention_heads",
    "hidden_size",
    "num_hidden_layers",
    "vocab_size",
    "intermediate_size",
)
# Bounds on what a config.json may claim (the largest public models are well inside them).
CONFIG_INT_LIMIT = 10**7


def _config_int(cfg: dict[str, Any], key: str, model_id: str, default: int | None = None) -> int:
    """A positive integer fact of a config.json, or a one-line error naming the model and key."""
    value = cfg.get(key, default)
    if value is None:
        raise UserInputError(f"{model_id}: config.json has no {key!r}", field="models")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= CONFIG_INT_LIMIT:
        excerpt = repr(value)[:40]
        raise UserInputError(
            f"{model_id}: config.json: {key} must be a whole number in 1..{CONFIG_INT_LIMIT:,}, "
            f"got {excerpt}",
            field="models",
        )
    return value


def arch_from_config(model_id: str, cfg: Any, path: str | None = None) -> ModelArch:
    """The planner's facts of an architecture, checked: a config.json that lacks one, or gives
    zero heads, or is not a mapping is a one-line UserInputError, never a traceback."""
    if not isinstance(cfg, dict):
        raise UserInputError(
            f"{model_id}: config.json must be a JSON object, got a {type(cfg).__name__}",
            field="models",
        )
    for key in REQUIRED_CONFIG_KEYS:
        _config_int(cfg, key, model_id)
    heads = _config_int(cfg, "num_attention_heads", model_id)
    hidden = _config_int(cfg, "hidden_size", model_id)
    layers = _config_int(cfg, "num_hidden_layers", model_id)
    _config_int(cfg, "num_key_value_heads", model_id, default=heads)
    if cfg.get("head_dim") is not None:
        _config_int(cfg, "head_dim", model_id)
    window = cfg.get("sliding_window")
    sliding_layers = 0
    if window:
        # Gemma-2 alternates sliding and global layers; Mistral/Phi-3 slide on every layer.
        sliding_layers = layers // 2 if cfg.get("model_type") == "gemma2" else layers
    return ModelArch(
        id=model_id,
        model_type=str(cfg.get("model_type", "llama")),
        vocab_size=int(cfg["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(cfg["intermediate_size"]),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        max_positions=int(cfg.get("max_position_embeddings", 2048)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
        sliding_window=int(window) if window else None,
        sliding_layers=sliding_layers,
        num_experts=int(cfg.get("num_local_experts", 1)),
        experts_per_token=int(cfg.get("num_experts_per_tok", 1)),
        attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
        path=path,
    )


@cache
def gpus() -> dict[str, GpuSpec]:
    rows = yaml.safe_load((HERE / "gpus.yaml").read_text())
    return {row["name"]: GpuSpec(**row) for row in rows}


@cache
def catalog_models() -> dict[str, ModelArch]:
    rows = yaml.safe_load((HERE / "models.yaml").read_text())
    models = {row["id"]: arch_from_config(row["id"], row["config"]) for row in rows}
    shipped_configs = [
        *sorted(PACKAGE_DATA.glob("*/config.json")),
        *sorted(resolver.CATALOG_CONFIGS.glob("*/config.json")),  # architectures, random weights
    ]
    for shipped in shipped_configs:
        name = shipped.parent.name
        models[name] = arch_from_config(name, json.loads(shipped.read_text()), str(shipped.parent))
    return models


def gpu(name: str) -> GpuSpec:
    """A catalog GPU by name or alias (case-insensitive)."""
    table = gpus()
    if name in table:
        return table[name]
    wanted = name.lower()
    for spec in table.values():
        if wanted == spec.name.lower() or wanted in (a.lower() for a in spec.aliases):
            return spec
    raise UserInputError(
        f"unknown GPU {name!r}{did_you_mean(name, table)}; known: {', '.join(table)}",
        field="gpu",
    )


def gpu_for_device_name(device_name: str) -> GpuSpec | None:
    """Match what torch/NVML report (e.g. 'NVIDIA H100 80GB HBM3') to a catalog entry."""
    lowered = device_name.lower()
    for spec in gpus().values():
        for alias in (spec.name, *spec.aliases):
            if alias.lower() == lowered:
                return spec
    return None


def model(model_id: str, revision: str = "main") -> ModelArch:
    """A catalog model, a shipped model (e.g. tiny-llama), a local directory with config.json, or
    a hub id whose config.json is in the Hugging Face cache or fetchable (harness.spec.models)."""
    table = catalog_models()
    if model_id in table:
        return table[model_id]
    local = Path(model_id).expanduser()
    if (local / "config.json").exists():  # a FIFO or a device too: read_config refuses it
        try:
            cfg = json.loads(resolver.read_config(local / "config.json"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise UserInputError(
                f"{model_id}: config.json is not readable JSON ({type(exc).__name__})",
                field="models",
            ) from None
        return arch_from_config(model_id, cfg, str(local.resolve()))
    if resolver.is_hub_id(model_id):
        try:
            return arch_from_config(model_id, resolver.hub_config(model_id, revision))
        except UserInputError:
            if not did_you_mean(model_id, table):
                raise  # the resolver's line: not cached offline, gated, no such revision, ...
    raise UserInputError(
        f"unknown model {model_id!r}{did_you_mean(model_id, table)}: expected a catalog id "
        f"({', '.join(table)}) or a local directory containing config.json",
        field="models.id",
    )
