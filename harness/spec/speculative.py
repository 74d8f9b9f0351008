"""Speculative decoding as an axis: what a scenario may write, what each method is, where it runs.

A scenario lists ``speculative: [none, {method: ngram, tokens: 4, lookup: [2, 4]},
{method: draft, model: ID, tokens: 5}]``. Each entry is typed by its ``method`` (pydantic's
discriminated union): n-gram prompt lookup (no weights), a draft model (its own weights and KV
cache; it must share the target's tokenizer), an EAGLE / EAGLE-3 head (a small checkpoint fed
the target's hidden states), or the target's own MTP layers (only where its checkpoint ships
them). ``synthetic: L`` replays a fixed mean acceptance length L through vLLM's synthetic
rejection sampler: comparable to the field's "golden acceptance length" runs, never a quality
claim (harness.results.speculation leaves it out of the gate and the measured tables).

A configuration is written as its label everywhere (a key, a row, a table), as a layout is:
``ngram:k=4,lookup=2-4``, ``draft:k=5,model=ID``, ``draft:k=5,rev=R,model=ID``,
``eagle3:k=3,model=ID``, ``mtp:k=1``, with ``,synthetic=L`` after ``k`` for a replay. ``none``
(no speculation) is None on a point, so the keys of earlier runs stay as they are.

One table, ``METHODS``, says per method vLLM's name, the engines and targets the harness measures
it on, and whether it loads weights of its own; ``rule_for`` checks an entry against a point's
engine, target and the model's architecture (the draft's tokenizer, the head's width, the MTP
layers) and says why not. ``vllm_config`` is vLLM's ``speculative_config``; ``draft_arch`` the
architecture whose weights and KV cache the memory plan adds (harness.plan); ``pool_shrink``
states how much of the target's KV pool and largest batch the draft takes.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_serializer,
)

from harness.errors import UserInputError
from harness.spec import catalog
from harness.spec.capabilities import ALL_TARGETS, GPU_TARGETS, Layout, Target
from harness.spec.compat import LAYOUT_RULES
from harness.spec.engines import engines
from harness.spec.yamlinput import Input

MAX_SPECULATIVE_TOKENS = 16  # draft tokens per step: beyond this acceptance has long collapsed
MAX_LOOKUP = 64  # n-gram lookup window, tokens
MAX_NAME = 200  # characters of a draft model id or revision
HASH_CHUNK = 1 << 22  # bytes read at a time where a file is hashed
NONE = "none"  # the axis value without speculation
NONE_ENTRY: Literal["none"] = "none"

MethodName = Literal["ngram", "draft", "eagle", "eagle3", "mtp"]


class SpeculationMethod(BaseModel):
    """One method: where the harness measures it and what it loads (each engine names the
    methods it takes, and its own name for each, on its card: harness.spec.engines).

    own_weights: a checkpoint of its own is loaded beside the target (its weights and KV cache
    enter the plan); shares_tokens_with_target: its tokens are the target's ids (a draft model
    must share the tokenizer); where: where its drafts come from, as a row says it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: MethodName
    targets: frozenset[Target]
    own_weights: bool
    where: str
    why_not_cpu: str = ""


METHODS: dict[str, SpeculationMethod] = {
    m.name: m
    for m in [
        # verified here: vLLM CPU 0.32 runs n-gram speculation on tiny-llama (issue 39)
        SpeculationMethod(
            name="ngram", targets=ALL_TARGETS,
            own_weights=False, where="n-gram lookup in the prompt",
        ),
        SpeculationMethod(
            name="draft", targets=ALL_TARGETS,
            own_weights=True, where="a draft model",
        ),
        SpeculationMethod(
            name="eagle", targets=GPU_TARGETS,
            own_weights=True, where="an EAGLE head on the target's hidden states",
            why_not_cpu="vLLM's EAGLE proposer runs on GPUs (CUDA, ROCm) only",
        ),
        SpeculationMethod(
            name="eagle3", targets=GPU_TARGETS,
            own_weights=True, where="an EAGLE-3 head on the target's hidden states",
            why_not_cpu="vLLM's EAGLE proposer runs on GPUs (CUDA, ROCm) only",
        ),
        SpeculationMethod(
            name="mtp", targets=GPU_TARGETS,
            own_weights=True, where="the checkpoint's own MTP layers",
            why_not_cpu="vLLM's MTP proposer runs on GPUs (CUDA, ROCm) only",
        ),
    ]
}  # fmt: skip

# checked here (2026-12-05): vLLM CPU 0.32 refuses the synthetic sampler at the first step
SYNTHETIC_NOT_ON_CPU = (
    "vLLM's CPU rejection sampler has no synthetic mode (vllm/utils/cpu_triton_utils.py: "
    '"Synthetic acceptance not supported with CPU sampling"); replay on a GPU'
)

# Model families whose checkpoints ship multi-token-prediction layers vLLM loads as `mtp`
# (vllm/config/speculative.py, SpeculativeConfig.hf_config_override, vLLM 0.32).
MTP_MODEL_TYPES = frozenset({
    "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "glm4_moe", "ernie4_5_moe", "qwen3_next",
    "mimo", "longcat_flash", "exaone_moe", "bailing_hybrid", "step3p5", "deepseek_mtp",
})  # fmt: skip


class _Base(Input):
    tokens: int = Field(gt=0, le=MAX_SPECULATIVE_TOKENS)  # draft tokens per step (k)
    # replay a fixed mean acceptance length L (vLLM's synthetic rejection sampler), 1 ≤ L ≤ k+1
    synthetic: float | None = Field(None, ge=1.0, le=MAX_SPECULATIVE_TOKENS + 1.0)

    @field_validator("synthetic")
    @classmethod
    def synthetic_within_the_draft(cls, value: float | None, info: ValidationInfo) -> float | None:
        tokens = info.data.get("tokens")
        if value is not None and tokens is not None and value > tokens + 1:
            raise ValueError(
                f"synthetic acceptance length {value:g} exceeds tokens + 1 = {tokens + 1} "
                "(at most every draft token and the bonus token are accepted)"
            )
        return value

    @property
    def label(self) -> str:
        raise NotImplementedError

    @model_serializer
    def as_label(self) -> str:
        return self.label

    def _tail(self) -> str:
        return f",synthetic={self.synthetic:g}" if self.synthetic is not None else ""


LookupTokens = Annotated[int, Field(gt=0, le=MAX_LOOKUP)]


class Ngram(_Base):
    """Drafts looked up in the prompt: the longest n-gram of `lookup` = [min, max] tokens that
    ends the text so far is found earlier in it, and the tokens after it are proposed."""

    method: Literal["ngram"] = "ngram"
    lookup: tuple[LookupTokens, LookupTokens] = (2, 4)

    @field_validator("lookup", mode="before")
    @classmethod
    def a_pair(cls, value: Any) -> Any:
        """[min, max] as YAML writes it, kept as a pair (a point's fields are hashable)."""
        return tuple(value) if isinstance(value, list) else value

    @field_validator("lookup")
    @classmethod
    def min_then_max(cls, value: tuple[int, int]) -> tuple[int, int]:
        if value[0] > value[1]:
            raise ValueError(f"lookup is [min, max] tokens; got min {value[0]} > max {value[1]}")
        return value

    @property
    def label(self) -> str:
        lookup = f",lookup={self.lookup[0]}-{self.lookup[1]}"
        return f"ngram:k={self.tokens}{self._tail()}{lookup}"


class _WithModel(_Base):
    revision: str = Field("main", min_length=1, max_length=MAX_NAME, pattern=r"^[^,]+$")
    model: str = Field(min_length=1, max_length=MAX_NAME)

    @field_validator("model")
    @classmethod
    def model_is_known(cls, value: str, info: ValidationInfo) -> str:
        """The draft's config.json must be readable (catalog id, local folder, cached hub id)."""
        try:
            catalog.model(value, info.data.get("revision") or "main")
        except UserInputError as exc:
            raise ValueError(exc.message) from None
        return value

    @property
    def label(self) -> str:
        rev = f",rev={self.revision}" if self.revision != "main" else ""
        return f"{self.method_name}:k={self.tokens}{self._tail()}{rev},model={self.model}"

    @property
    def method_name(self) -> str:
        raise NotImplementedError

    def arch(self) -> catalog.ModelArch:
        return catalog.model(self.model, self.revision)


class Draft(_WithModel):
    """A smaller model of the same tokenizer drafts `tokens` tokens, the target verifies them."""

    method: Literal["draft"] = "draft"

    @property
    def method_name(self) -> str:
        return "draft"


class Eagle(_WithModel):
    """An EAGLE (or EAGLE-3) head: a one-layer checkpoint fed the target's hidden states."""

    method: Literal["eagle", "eagle3"]

    @property
    def method_name(self) -> str:
        return self.method


class Mtp(_Base):
    """The target checkpoint's own multi-token-prediction layers (DeepSeek-V3, GLM-4.5, …)."""

    method: Literal["mtp"] = "mtp"

    @property
    def label(self) -> str:
        return f"mtp:k={self.tokens}{self._tail()}"


LABEL_PATTERN = re.compile(
    r"^(?P<method>ngram|draft|eagle3|eagle|mtp):k=(?P<k>\d+)"
    r"(?:,synthetic=(?P<synthetic>[0-9.]+))?(?:,lookup=(?P<lo>\d+)-(?P<hi>\d+))?"
    r"(?:,rev=(?P<rev>[^,]+))?(?:,model=(?P<model>.+))?$"
)


def from_label(data: Any) -> Any:
    """A label (as rows and keys write a configuration) back to its fields; anything else as is."""
    if not isinstance(data, str):
        return data
    match = LABEL_PATTERN.fullmatch(data)
    if match is None:
        raise ValueError(
            f"a speculative configuration is a mapping with `method` "
            f"({', '.join(METHODS)}) or its label, like ngram:k=4,lookup=2-4; got {data[:40]!r}"
        )
    fields: dict[str, Any] = {"method": match["method"], "tokens": int(match["k"])}
    if match["synthetic"]:
        fields["synthetic"] = float(match["synthetic"])
    if match["lo"]:
        fields["lookup"] = (int(match["lo"]), int(match["hi"]))
    if match["rev"]:
        fields["revision"] = match["rev"]
    if match["model"]:
        fields["model"] = match["model"]
    return fields


def method_tag(value: Any) -> str | None:
    """The union tag of a configuration: by its ``method`` (a mapping, or one already built);
    None for anything else (refused with the expected shapes)."""
    method = value.get("method") if isinstance(value, dict) else getattr(value, "method", None)
    if method not in METHODS:
        return None
    return "method-eagle" if method in ("eagle", "eagle3") else f"method-{method}"


def entry_tag(value: Any) -> str | None:
    """The tag of an axis entry: "none", or a configuration by its method."""
    return "no-speculation" if value == NONE else method_tag(value)


_EXPECTED = (
    f"expected none or a mapping with method ({', '.join(METHODS)}) and tokens, like "
    "{method: ngram, tokens: 4, lookup: [2, 4]} or {method: draft, model: ID, tokens: 5}"
)
_CONFIGURATIONS = (
    Annotated[Ngram, Tag("method-ngram")]
    | Annotated[Draft, Tag("method-draft")]
    | Annotated[Eagle, Tag("method-eagle")]
    | Annotated[Mtp, Tag("method-mtp")]
)
# a point's configuration: one of the methods' (or its label, as rows and keys write it)
Speculative = Annotated[
    _CONFIGURATIONS,
    Discriminator(method_tag, custom_error_type="speculative", custom_error_message=_EXPECTED),
    BeforeValidator(from_label),
]
# an entry of the scenario's `speculative:` list: "none" (no speculation) or a configuration
SpeculativeEntry = Annotated[
    Annotated[Literal["none"], Tag("no-speculation")] | _CONFIGURATIONS,
    Discriminator(entry_tag, custom_error_type="speculative", custom_error_message=_EXPECTED),
]


def without_speculation() -> list[SpeculativeEntry]:
    """The axis when a scenario does not name it: plain decoding only."""
    return [NONE_ENTRY]


def method_of(spec: Ngram | Draft | Eagle | Mtp) -> SpeculationMethod:
    return METHODS[spec.method]


def describe(spec: Ngram | Draft | Eagle | Mtp | None) -> str:
    """The configuration in words, for a plan line or a row's note."""
    if spec is None:
        return "no speculation"
    replay = f"; synthetic acceptance {spec.synthetic:g}" if spec.synthetic is not None else ""
    return f"{spec.tokens} draft tokens from {method_of(spec).where}{replay}"


# --- what can run ----------------------------------------------------------------------------


def tokenizer_hash(arch: catalog.ModelArch) -> str | None:
    """sha256 of the model folder's tokenizer.json, where it has a local folder with one (read
    in chunks of ``HASH_CHUNK`` bytes: a tokenizer file of any size in bounded memory)."""
    if arch.path is None:
        return None
    path = Path(arch.path) / "tokenizer.json"
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def engine_rule(
    method_name: str, synthetic: bool, backend: str, target: str
) -> tuple[str, str] | None:
    """(rule id, reason) where the method (``METHODS``), or a synthetic replay, is not measured
    on this engine and target; None where it is. Plan and row admission ask the same rule."""
    method = METHODS[method_name]
    if method.name not in engines()[backend].speculation:
        return "speculation-vllm-only", (
            f"speculative decoding is measured with vLLM's speculative_config; the {backend} "
            "backend has none in this harness"
        )
    if target not in method.targets:
        why = method.why_not_cpu or f"{method_name} is not measured on {target}"
        return f"speculation-{method_name}-targets", why
    if synthetic and target not in GPU_TARGETS:
        return "speculation-synthetic-gpu-only", SYNTHETIC_NOT_ON_CPU
    return None


def rule_for(
    spec: Ngram | Draft | Eagle | Mtp,
    backend: str,
    target: str,
    arch: catalog.ModelArch,
    layout: Layout | None = None,
) -> tuple[str, str] | None:
    """(rule id, reason) of the first rule the configuration breaks on this engine, target,
    target model and layout, or None."""
    engine = engine_rule(spec.method, spec.synthetic is not None, backend, target)
    if engine is not None:
        return engine
    sharded = draft_layout_rule(spec, arch, backend, layout)
    if sharded is not None:
        return sharded
    if isinstance(spec, Draft):
        return _draft_shares_tokenizer(spec, arch)
    if isinstance(spec, Eagle):
        head = spec.arch()
        if head.hidden_size != arch.hidden_size:
            return "eagle-head-width", (
                f"the {spec.method} head {spec.model} reads hidden states of width "
                f"{head.hidden_size}; {arch.id} has {arch.hidden_size}: a head for another model"
            )
    if isinstance(spec, Mtp) and arch.model_type not in MTP_MODEL_TYPES:
        return "mtp-checkpoint-ships-layers", (
            f"{arch.id} ({arch.model_type}) ships no MTP layers; MTP speculation needs a "
            f"checkpoint of a family that has them ({', '.join(sorted(MTP_MODEL_TYPES))})"
        )
    return None


# The draft's attention is split as the target's: vLLM's SpeculativeConfig leaves
# draft_tensor_parallel_size unset, so _verify_and_get_draft_tp sets it to the target's tensor
# parallel size (vllm/config/speculative.py, vLLM 0.32; v1's DraftModelProposer refuses any
# other size), and the drafter is built on the last pipeline rank only (gpu_model_runner).
DRAFT_SHARD_RULES = frozenset({"tp-divides-heads", "tp-kv-heads"})


def draft_layout(layout: Layout | None) -> Layout | None:
    """The layout the engine shards a draft (or head, or MTP layer) at under the target's
    ``layout``: the target's tensor ranks, no pipeline (None on one card)."""
    if layout is None or layout.tensor == 1:
        return None
    return Layout(tensor=layout.tensor)


def draft_on_stage(layout: Layout | None, stage: int) -> bool:
    """Whether a rank of pipeline ``stage`` holds the draft: the last stage's ranks only."""
    return layout is None or stage == layout.pipeline - 1


def draft_layout_rule(
    spec: Ngram | Draft | Eagle | Mtp, arch: catalog.ModelArch, backend: str, layout: Layout | None
) -> tuple[str, str] | None:
    """(rule id, reason) where the draft's heads do not split over the target's tensor ranks
    (``draft_layout``), the rules a target's layout is held to; None where they do."""
    sharded, draft = draft_layout(layout), draft_arch(spec, arch)
    if sharded is None or draft is None:
        return None
    for rule in LAYOUT_RULES:
        if rule.id in DRAFT_SHARD_RULES and rule.breaks(sharded, draft, backend):
            return f"draft-{rule.id}", (
                f"vLLM shards the {spec.method} draft at the target's tensor parallel size: "
                f"{rule.reason(sharded, draft, backend)} of the draft"
            )
    return None


def _draft_shares_tokenizer(spec: Draft, arch: catalog.ModelArch) -> tuple[str, str] | None:
    """A draft model proposes token ids the target verifies: one vocabulary (vLLM refuses
    unequal sizes), and where both folders ship a tokenizer.json, the same file."""
    draft = spec.arch()
    if draft.vocab_size != arch.vocab_size:
        return "draft-same-tokenizer", (
            f"draft {spec.model} has a vocabulary of {draft.vocab_size:,} tokens, {arch.id} "
            f"{arch.vocab_size:,}: a draft must share the target's tokenizer"
        )
    mine, theirs = tokenizer_hash(draft), tokenizer_hash(arch)
    if mine is not None and theirs is not None and mine != theirs:
        return "draft-same-tokenizer", (
            f"draft {spec.model} and {arch.id} have vocabularies of one size but different "
            "tokenizer.json files: a draft must share the target's tokenizer"
        )
    return None


# --- the engine's configuration --------------------------------------------------------------


# --- the memory plan ---------------------------------------------------------------------------


def draft_arch(
    spec: Ngram | Draft | Eagle | Mtp | None, target: catalog.ModelArch
) -> catalog.ModelArch | None:
    """The architecture whose weights and KV cache the plan adds beside the target's: the draft
    model's, the head's (its own config.json), or for MTP one decoder layer of the target per
    draft step vLLM runs (one MTP module, reused); None for n-gram lookup (nothing loaded)."""
    if spec is None or not method_of(spec).own_weights:
        return None
    if isinstance(spec, Draft | Eagle):
        return spec.arch()
    return target.model_copy(update={"num_layers": 1, "tie_embeddings": True})


class PoolShrink(BaseModel):
    """What the draft takes from the target's KV pool under vLLM's pre-allocation on a GPU
    (every figure in bytes or tokens; see ``pool_shrink``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    pool_plain_bytes: float
    pool_bytes: float  # the pool left once the draft's weights are loaded
    tokens_plain: int  # tokens the plain pool holds (target KV only)
    tokens: int  # tokens the pool holds with the draft (target + draft KV per token)
    batch_plain: int  # sequences of (context + output) tokens that fit, plain
    batch: int  # with the draft

    @property
    def shrink_pct(self) -> float:
        """The share of the target's KV tokens the draft costs, in percent."""
        return 100.0 * (1 - self.tokens / self.tokens_plain) if self.tokens_plain else 0.0

    def sentence(self) -> str:
        return (
            f"the draft shrinks the KV pool from {self.tokens_plain:,} to {self.tokens:,} tokens "
            f"({self.shrink_pct:.1f} % fewer): the largest batch at this context falls from "
            f"{self.batch_plain:,} to {self.batch:,}"
        )


def pool_shrink(
    *,
    capacity_bytes: float,
    held_bytes: float,
    draft_weights_bytes: float,
    kv_per_token: float,
    draft_kv_per_token: float,
    sequence_tokens: int,
) -> PoolShrink:
    """vLLM gives the KV pool what its share of the card leaves: pool = capacity − held (target
    weights, activations, reserve) − the draft's weights; target and draft keep a KV entry per
    token in that one pool, so tokens = ⌊pool / (kv_target + kv_draft)⌋ and the largest batch =
    ⌊tokens / (context + output)⌋."""
    plain = max(0.0, capacity_bytes - held_bytes)
    pool = max(0.0, plain - draft_weights_bytes)
    tokens_plain = int(plain // kv_per_token) if kv_per_token else 0
    tokens = int(pool // (kv_per_token + draft_kv_per_token)) if kv_per_token else 0
    return PoolShrink(
        pool_plain_bytes=plain,
        pool_bytes=pool,
        tokens_plain=tokens_plain,
        tokens=tokens,
        batch_plain=tokens_plain // sequence_tokens,
        batch=tokens // sequence_tokens,
    )


def entries_once(values: list[Any]) -> list[Any]:
    """The axis' entries, each once (two labels equal: the same configuration)."""
    seen: set[str] = set()
    for value in values:
        label = NONE if value == NONE else value.label
        if label in seen:
            raise ValueError(f"speculative configuration {label[:40]!r} is listed twice")
        seen.add(label)
    return values
