"""GPU specs and model architectures, read from the YAML data files beside this module.

A model is a catalog id or a local directory holding a config.json; both go through
`arch_from_config`, so the catalog and real checkpoints share one parser.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from harness.errors import UserInputError, did_you_mean, quote
from harness.spec import models as resolver
from harness.spec.capabilities import WEIGHT_FORMATS

HERE = Path(__file__).parent
PACKAGE_DATA = HERE.parents[1] / "data"

Vendor = Literal["nvidia", "amd", "cpu"]
Fp8Flavour = Literal["e4m3fn", "e4m3fnuz"]
Fp4Flavour = Literal["nvfp4", "mxfp4"]
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class GpuSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    vendor: Vendor
    memory_gib: float
    bandwidth_gb_s: float
    bf16_tflops: float
    fp8_tflops: float | None
    # Per-GPU card-to-card bandwidth (NVLink / xGMI / PCIe), one direction, GB/s; None = unknown.
    interconnect_gb_s: float | None = None
    aliases: tuple[str, ...] = ()
    source: str
    # Dense fp4 tensor peak, 10**12 FLOP/s (None: no fp4 unit; prefill in an fp4 format then runs
    # at the fp8 or bf16 peak, the weights dequantized).
    fp4_tflops: float | None = None
    # The fp8 the tensor units take (OCP e4m3fn; MI300-series e4m3fnuz) and the fp4 block formats
    # they run natively (harness.spec.capabilities: nvfp4, mxfp4).
    fp8_flavour: Fp8Flavour | None = None
    fp4_flavours: tuple[Fp4Flavour, ...] = ()
    # Cards joined at interconnect_gb_s (an NVLink / Infinity Fabric domain): 8 on an HGX or OAM
    # board, 72 in an NVL72 rack, 1 where cards meet over PCIe only.
    nvlink_domain: int = Field(1, ge=1, le=1024)
    read_on: str | None = None  # the date the source was read (YYYY-MM-DD)
    derivation: str = ""  # how a dense figure follows from a sparse-only or rack-level datasheet


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
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): K and V are one compressed latent of
    # kv_lora_rank elements plus a shared rope key of qk_rope_head_dim per token and layer (0:
    # not MLA). head_dim is then the query/key head (nope + rope), v_head_dim the value head.
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    q_lora_rank: int = 0  # 0: queries projected directly (DeepSeek-V2-Lite)
    v_head_dim: int = 0
    # MoE: the shared expert(s) every token passes through (summed MLP width; 0: none), and the
    # first `dense_layers` layers whose MLP is dense of `dense_intermediate_size`
    # (first_k_dense_replace).
    shared_expert_size: int = 0
    shared_expert_gate: bool = False  # Qwen2-MoE's sigmoid gate on the shared expert (h × 1)
    dense_layers: int = 0
    dense_intermediate_size: int = 0
    attention_sinks: bool = False  # gpt-oss: one learned sink logit per head and layer
    # The weight format the checkpoint ships in (its config.json `quantization_config`), planned
    # when a scenario says `none`; and which linears it covers (all, or the routed experts only).
    shipped_format: str | None = None
    shipped_parts: Literal["linears", "experts"] = "linears"

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (the rest are dense)."""
        return self.num_layers - self.dense_layers if self.num_experts > 1 else 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each linear of one decoder layer (Llama-style names);
        the MLP's three count once per expert on a mixture of experts (see `MLP_LINEARS`)."""
        h, hd, i = self.hidden_size, self.head_dim, self.intermediate_size
        q, kv = self.num_heads * hd, self.num_kv_heads * hd
        mlp = {"gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
        if self.is_mla:
            return {**self.mla_shapes(), **mlp}
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), **mlp}

    def mla_shapes(self) -> dict[str, tuple[int, int]]:
        """MLA's attention linears (DeepSeek-V3's names): queries through a rank-q_lora_rank
        bottleneck (or directly), K/V down to the latent plus the rope key, up from the latent
        to every head's nope key and value, and the output."""
        h, heads, rope = self.hidden_size, self.num_heads, self.qk_rope_head_dim
        nope, latent = self.head_dim - rope, self.kv_lora_rank
        q_out = heads * self.head_dim
        queries = (
            {"q_a_proj": (h, self.q_lora_rank), "q_b_proj": (self.q_lora_rank, q_out)}
            if self.q_lora_rank
            else {"q_proj": (h, q_out)}
        )
        return {
            **queries,
            "kv_a_proj_with_mqa": (h, latent + rope),
            "kv_b_proj": (latent, heads * (nope + self.v_head_dim)),
            "o_proj": (heads * self.v_head_dim, h),
        }

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        """Bytes of K and V for one token across all layers (before any sliding-window cap).
        MLA caches the latent and the rope key, layers × (kv_lora_rank + qk_rope_head_dim) ×
        bytes, no factor 2: vLLM's MLA backends store exactly these 576 elements a token and
        layer for DeepSeek-V3 (one "head" of kv_lora_rank + rope, K and V both read from it)."""
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * bytes_per_element
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


# Bounds on what a config.json may claim (the largest public models are well inside them).
CONFIG_INT_LIMIT = 10**7
MAX_POSITIONS = 10**8  # tokens of context a config may claim (public models: up to 10^7)
MAX_EXPERTS = 4096


def _whole(low: int, high: int) -> Any:
    return Field(strict=True, ge=low, le=high, description=f"a whole number in {low}..{high:,}")


Count = Annotated[int, _whole(1, CONFIG_INT_LIMIT)]
COUNT_WORDS = f"a whole number in 1..{CONFIG_INT_LIMIT:,}"
Flag = Annotated[bool | None, Field(strict=True, description="true, false or null")]


def _known_dtype(name: str) -> str:
    if name not in DTYPE_BYTES:
        raise ValueError("unknown dtype")
    return name


DTYPE_WORDS = ", ".join(DTYPE_BYTES)
DtypeName = Annotated[str, Field(strict=True), AfterValidator(_known_dtype)]


class ConfigJson(BaseModel):
    """Every key of a config.json the planner reads, typed and bounded (the rest is ignored):
    as strict as a scenario, so a string, NaN, infinity or out-of-range value is refused."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True, allow_inf_nan=False)
    vocab_size: Count
    hidden_size: Count
    intermediate_size: Count
    num_hidden_layers: Count
    num_attention_heads: Count
    num_key_value_heads: Annotated[Count | None, Field(description=COUNT_WORDS)] = None
    head_dim: Annotated[Count | None, Field(description=COUNT_WORDS)] = None
    max_position_embeddings: Annotated[int, _whole(1, MAX_POSITIONS)] = 2048
    sliding_window: Annotated[
        Annotated[int, _whole(0, MAX_POSITIONS)] | None,
        Field(description=f"a whole number in 0..{MAX_POSITIONS:,} or null"),
    ] = None
    use_sliding_window: Flag = None
    num_local_experts: Annotated[int, _whole(1, MAX_EXPERTS)] = 1
    # Qwen-MoE names: its experts, and each expert's MLP width (intermediate_size is then the
    # dense MLP's, unused where every layer is sparse)
    num_experts: Annotated[
        Annotated[int, _whole(1, MAX_EXPERTS)] | None,
        Field(description=f"a whole number in 1..{MAX_EXPERTS:,} or null"),
    ] = None
    moe_intermediate_size: Annotated[Count | None, Field(description=COUNT_WORDS)] = None
    num_experts_per_tok: Annotated[int, _whole(1, MAX_EXPERTS)] = 1
    torch_dtype: Annotated[DtypeName | None, Field(description=f"one of {DTYPE_WORDS}")] = None
    dtype: Annotated[DtypeName | None, Field(description=f"one of {DTYPE_WORDS}")] = None
    tie_word_embeddings: Flag = None
    attention_bias: Flag = None
    model_type: Annotated[
        str, Field(strict=True, min_length=1, max_length=200, description="a name")
    ] = "llama"
    # multi-head latent attention (DeepSeek-V2/V3, Kimi-K2)
    kv_lora_rank: Annotated[Count | None, Field(description=COUNT_WORDS)] = None
    q_lora_rank: Annotated[Count | None, Field(description=COUNT_WORDS)] = None
    qk_rope_head_dim: Annotated[Count | None, Field(description=COUNT_WORDS)] = None
    qk_nope_head_dim: Annotated[Count | None, Field(description=COUNT_WORDS)] = None
    v_head_dim: Annotated[Count | None, Field(description=COUNT_WORDS)] = None
    # DeepSeek's MoE names: routed and shared experts, the dense layers first
    n_routed_experts: Annotated[
        Annotated[int, _whole(1, MAX_EXPERTS)] | None,
        Field(description=f"a whole number in 1..{MAX_EXPERTS:,} or null"),
    ] = None
    n_shared_experts: Annotated[
        Annotated[int, _whole(0, MAX_EXPERTS)] | None,
        Field(description=f"a whole number in 0..{MAX_EXPERTS:,} or null"),
    ] = None
    first_k_dense_replace: Annotated[int, _whole(0, CONFIG_INT_LIMIT)] = 0
    # Qwen2-MoE's shared expert width; Llama-4's dense MLP width and chunked-attention span
    shared_expert_intermediate_size: Annotated[Count | None, Field(description=COUNT_WORDS)] = None
    intermediate_size_mlp: Annotated[Count | None, Field(description=COUNT_WORDS)] = None
    attention_chunk_size: Annotated[Count | None, Field(description=COUNT_WORDS)] = None
    # how the checkpoint's weights are stored (checked by shipped_format, not here)
    quantization_config: Annotated[
        dict[str, Any] | None, Field(strict=False, description="a mapping or null")
    ] = None

    @property
    def experts(self) -> int:
        """The routed experts per MoE layer, under any of the names (1: dense)."""
        if self.num_local_experts > 1:
            return self.num_local_experts
        return self.num_experts or self.n_routed_experts or 1

    def contradiction(self) -> tuple[str, str] | None:
        """(key, why) when the keys disagree with each other."""
        heads, kv = self.num_attention_heads, self.num_key_value_heads or self.num_attention_heads
        if heads % kv:
            return "num_key_value_heads", f"must divide num_attention_heads ({heads}), got {kv}"
        if self.head_dim is None and self.hidden_size < heads:
            return "num_attention_heads", f"{heads} heads exceed hidden_size {self.hidden_size}"
        if self.num_experts_per_tok > self.experts:
            return "num_experts_per_tok", (
                f"{self.num_experts_per_tok} exceeds num_local_experts {self.experts}"
            )
        return None


def config_problem(exc: ValidationError, cfg: dict[str, Any]) -> str:
    """The first problem of a config.json in words: the key, what was expected, what was got."""
    err = exc.errors()[0]
    key = str(err["loc"][0]) if err["loc"] else "?"
    if err["type"] == "missing":
        return f"no {key!r} (a whole number the planner needs)"
    field = ConfigJson.model_fields.get(key)
    expected = field.description if field is not None and field.description else err["msg"]
    return f"{key} must be {expected}, got {quote(cfg.get(key))}"


def read_facts(cfg: Any, where: str) -> ConfigJson:
    """A config.json's planner facts, or a one-line UserInputError naming the file and the key."""
    if not isinstance(cfg, dict):
        raise UserInputError(
            f"{where} must be a JSON object, got a {type(cfg).__name__}", field="models"
        )
    try:
        facts = ConfigJson.model_validate(cfg)
    except ValidationError as exc:
        raise UserInputError(f"{where}: {config_problem(exc, cfg)}", field="models") from None
    wrong = facts.contradiction()
    if wrong is not None:
        raise UserInputError(f"{where}: {wrong[0]} {wrong[1]}", field="models")
    return facts


def arch_from_config(
    model_id: str, cfg: Any, path: str | None = None, *, where: str | None = None
) -> ModelArch:
    """The planner's facts of an architecture, checked (``ConfigJson``): a config.json that lacks
    one, or gives zero heads, NaN, a string, or is not a mapping is a one-line UserInputError
    naming ``where`` (the file) and the key, never a traceback."""
    where = where or (f"{path}/config.json" if path else f"{model_id}: config.json")
    if isinstance(cfg, dict) and isinstance(cfg.get("text_config"), dict):
        # a multimodal config (Llama-4): the language model's facts are its text_config's
        cfg = {**cfg["text_config"], "quantization_config": cfg.get("quantization_config")}
    facts = read_facts(cfg, where)
    layers, heads = facts.num_hidden_layers, facts.num_attention_heads
    window = facts.sliding_window if facts.use_sliding_window is not False else None
    sliding_layers = 0
    if window:
        # Gemma-2 and GPT-OSS alternate sliding and global layers; Mistral/Phi-3 slide on every
        # layer.
        sliding_layers = layers // 2 if facts.model_type in ("gemma2", "gpt_oss") else layers
    elif facts.attention_chunk_size and facts.model_type.startswith("llama4"):
        # Llama-4: three of every four layers attend within chunks of attention_chunk_size
        # (transformers' default no_rope_layers); a chunk holds at most that many tokens' KV
        window, sliding_layers = facts.attention_chunk_size, layers - layers // 4
    attention_bias = facts.attention_bias
    mla = facts.kv_lora_rank is not None
    shipped = shipped_format(facts.quantization_config)
    return ModelArch(
        **_moe_facts(facts),
        kv_lora_rank=facts.kv_lora_rank or 0,
        qk_rope_head_dim=(facts.qk_rope_head_dim or 0) if mla else 0,
        q_lora_rank=(facts.q_lora_rank or 0) if mla else 0,
        v_head_dim=(facts.v_head_dim or 0) if mla else 0,
        attention_sinks=facts.model_type == "gpt_oss",
        shipped_format=shipped[0] if shipped else None,
        shipped_parts=shipped[1] if shipped else "linears",
        id=model_id,
        model_type=facts.model_type,
        vocab_size=facts.vocab_size,
        hidden_size=facts.hidden_size,
        intermediate_size=(
            facts.moe_intermediate_size
            if facts.experts > 1 and facts.moe_intermediate_size
            else facts.intermediate_size
        ),
        num_layers=layers,
        num_heads=heads,
        # MLA's cache is one latent "head" whole on every tensor rank (vLLM replicates it)
        num_kv_heads=1 if mla else facts.num_key_value_heads or heads,
        head_dim=(
            (facts.qk_nope_head_dim or 0) + (facts.qk_rope_head_dim or 0)
            if mla
            else facts.head_dim or facts.hidden_size // heads
        ),
        max_positions=facts.max_position_embeddings,
        tie_embeddings=bool(facts.tie_word_embeddings),
        dtype=facts.torch_dtype or facts.dtype or "bfloat16",
        sliding_window=window or None,
        sliding_layers=sliding_layers,
        num_experts=facts.experts,
        experts_per_token=facts.num_experts_per_tok,
        attention_bias=facts.model_type == "qwen2" if attention_bias is None else attention_bias,
        path=path,
    )


def _moe_facts(facts: ConfigJson) -> dict[str, Any]:
    """Shared experts and dense-first layers under each family's names: DeepSeek's
    n_shared_experts × moe_intermediate_size and first_k_dense_replace (dense width
    intermediate_size), Qwen2-MoE's shared_expert_intermediate_size (with its gate), Llama-4's
    one shared expert of intermediate_size."""
    if facts.experts == 1:
        return {}
    expert = facts.moe_intermediate_size or facts.intermediate_size
    shared = 0
    if facts.n_shared_experts:
        shared = facts.n_shared_experts * expert
    elif facts.shared_expert_intermediate_size:
        shared = facts.shared_expert_intermediate_size
    elif facts.model_type.startswith("llama4"):
        shared = facts.intermediate_size
    dense = facts.first_k_dense_replace
    return {
        "shared_expert_size": shared,
        "shared_expert_gate": bool(facts.shared_expert_intermediate_size),
        "dense_layers": min(dense, facts.num_hidden_layers),
        "dense_intermediate_size": facts.intermediate_size if dense else 0,
    }


# A checkpoint's quantization_config → (the weight format it ships, the linears it covers).
SHIPPED_METHODS = {"mxfp4": "mxfp4", "modelopt_fp4": "nvfp4"}


def shipped_format(qcfg: dict[str, Any] | None) -> tuple[str, str] | None:
    """The format a checkpoint ships in, read from config.json's quantization_config: gpt-oss's
    "mxfp4" (its experts: attention, router, embeddings and lm_head are listed unconverted),
    DeepSeek's "fp8" with a 128 × 128 weight_block_size (every linear but the router and
    lm_head), NVIDIA ModelOpt's NVFP4; None for an unquantized checkpoint or a method the
    planner does not model (then the scenario's format is planned as given)."""
    if not qcfg:
        return None
    method = str(qcfg.get("quant_method", ""))
    if method == "fp8" and list(qcfg.get("weight_block_size") or []) == [128, 128]:
        return "fp8-block", "linears"
    if method == "mxfp4":
        return "mxfp4", "experts"
    if method == "modelopt" and str(qcfg.get("quant_algo", "")).upper() == "NVFP4":
        return "nvfp4", "linears"
    return None


@cache
def gpus() -> dict[str, GpuSpec]:
    rows = yaml.safe_load((HERE / "gpus.yaml").read_text())
    return {row["name"]: GpuSpec(**row) for row in rows}


@cache
def catalog_models() -> dict[str, ModelArch]:
    rows = yaml.safe_load((HERE / "models.yaml").read_text())
    where = str(HERE / "models.yaml")
    models = {
        row["id"]: arch_from_config(row["id"], row["config"], where=f"{where} ({row['id']})")
        for row in rows
    }
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
        f"unknown GPU {quote(name)}{did_you_mean(name, table)}; known: {', '.join(table)}",
        field="gpu",
    )


def format_peak_tflops(card: GpuSpec, quantization: str) -> float | None:
    """The dense peak a weight format's matrix multiplies run at on a card, TFLOP/s: an fp4
    format on the card's fp4 units only where the card lists its flavour (NVFP4 on Blackwell,
    MXFP4 on Blackwell and CDNA 4), else dequantized to the bf16 peak (vLLM's weight-only
    Marlin/Triton paths); fp8 formats on the fp8 units (None where the card has none: the
    format does not run as measured); W8A8 int8 at twice the bf16 rate (the int8 tensor rate of
    Ampere to Blackwell and CDNA; Blackwell Ultra cut int8, so this overstates B300/GB300);
    everything else at the bf16 peak. (A checkpoint that ships quantized under `none`: ask
    with its shipped format, harness.plan.bytes.planned_format.)"""
    fmt = WEIGHT_FORMATS[quantization]
    if fmt.tensor_unit == "fp4":
        if fmt.card_flavour in card.fp4_flavours and card.fp4_tflops:
            return card.fp4_tflops
        return card.bf16_tflops
    if fmt.tensor_unit == "fp8":
        return card.fp8_tflops
    if fmt.tensor_unit == "int8":
        return 2 * card.bf16_tflops
    return card.bf16_tflops


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
    a hub id whose config.json is in the Hugging Face cache or fetchable (harness.spec.models).
    A hub id at a revision other than ``main`` is read from that revision's own config.json
    (the catalog's facts are those of ``main``); one that cannot be had is refused, naming it."""
    table = catalog_models()
    hub = resolver.is_hub_id(model_id)
    if model_id in table and (revision == "main" or not hub):
        return table[model_id]
    resolver.refuse_symlink_loop(model_id)  # which `exists` below would call missing
    local = Path(model_id).expanduser()
    if (local / "config.json").exists():  # a FIFO or a device too: read_config refuses it
        return arch_from_config(
            model_id, read_json(local / "config.json", model_id), str(local.resolve())
        )
    if hub:
        try:
            where, cfg = resolver.hub_config_file(model_id, revision)
            return arch_from_config(model_id, cfg, where=where)
        except UserInputError:
            known = model_id in table or resolver.repo_folder(model_id).is_dir()
            if known or not did_you_mean(model_id, table):
                raise  # the resolver's line: not cached offline, gated, no such revision, ...
    raise UserInputError(
        f"unknown model {quote(model_id)}{did_you_mean(model_id, table)}: expected a catalog id "
        f"({', '.join(table)}) or a local directory containing config.json",
        field="models.id",
    )


def read_json(path: Path, model_id: str) -> Any:
    """A config.json parsed, or one line naming the model and the file."""
    try:
        return json.loads(resolver.read_config(path))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UserInputError(
            f"{model_id}: config.json is not readable JSON ({type(exc).__name__}): {path}",
            field="models",
        ) from None
