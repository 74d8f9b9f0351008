"""Scenario YAML → validated Scenario → grid of Points (and skips, each with its reason).

The YAML shape is a contract (see README). Validation happens before anything runs; errors name
the file, the line, the field path, what was expected and, for near misses, what was meant.
Reading is strict: no coercion ("8" is not 8, true is not 1), every number finite and inside the
bounds below (the bound is in the message), every list capped and free of duplicates, and the
grid capped at ``MAX_GRID_POINTS`` before it is expanded.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from harness import __version__, modes
from harness.errors import UserInputError
from harness.spec import adapters, catalog, inputs, models, yamlinput
from harness.spec.capabilities import (
    WEIGHT_FORMATS,
    Backend,
    KvCacheDtype,
    Layout,
    Quantization,
    Target,
)
from harness.spec.compat import layout_rule_for, rule_for
from harness.spec.engine_options import EngineBlocks, renamed_keys
from harness.spec.labels import adapter_label, model_key
from harness.spec.parallel import Parallel
from harness.spec.quality import QualitySettings
from harness.spec.speculative import (
    Speculative,
    SpeculativeEntry,
    entries_once,
    without_speculation,
)
from harness.spec.speculative import rule_for as speculation_rule_for
from harness.spec.yamlinput import (
    Input,
    Strict,
    excerpt,
    load_model,
    located,
    parse_model,
    unique,
)

# Plausible bounds: a value outside them is a typo or an attack, never a benchmark.
MAX_BATCH = 4096
MAX_CONTEXT = 1 << 20  # tokens (1,048,576)
MAX_OUTPUT_TOKENS = 1 << 16  # 65,536
MAX_REPEATS = 100
MAX_WARMUPS = 100
MAX_MIN_DURATION_S = 3600.0
MAX_SEED = 2**32 - 1  # numpy's seed range
MAX_MODELS = 32
MAX_AXIS_VALUES = 64  # values in one list: batch, context, …
MAX_EXCLUDES = 256
MAX_GRID_POINTS = 10_000  # cells of the grid before skips
MAX_NAME = 200  # characters of a model id, revision or GPU name
MAX_PATH = 4096  # characters of a path (an adapter folder)

Batch = Annotated[int, Field(gt=0, le=MAX_BATCH)]
Context = Annotated[int, Field(gt=0, le=MAX_CONTEXT)]


Weights = Literal["checkpoint", "random"]


class ModelRef(Input):
    # revision before id: the id is looked up at its revision (its own config.json)
    revision: str = Field("main", min_length=1, max_length=MAX_NAME)
    id: str = Field(min_length=1, max_length=MAX_NAME)
    # "random": the architecture from config.json on random weights (no checkpoint needed):
    # speed and memory only, no quality, never priced.
    weights: Weights = "checkpoint"
    # a PEFT LoRA folder trained on this model at this revision (harness.spec.adapters): its
    # recorded base is checked against the entry, and a mismatch refused
    adapter: str | None = Field(None, min_length=1, max_length=MAX_PATH)

    def point_fields(self) -> dict[str, Any]:
        """What every point of this model takes from it, in every mode: model, revision, weights
        and adapter."""
        return {
            "model": self.id,
            "revision": self.revision,
            "weights": self.weights,
            "adapter": self.adapter,
        }

    @model_validator(mode="after")
    def adapter_is_bound_to_this_model(self) -> ModelRef:
        """The adapter's recorded base (id, revision, commit, weights hash) is this entry's."""
        if self.adapter is None:
            return self
        if self.weights == "random":
            raise ValueError(
                "an adapter needs the checkpoint it was trained on, not weights: random"
            )
        try:
            adapter = adapters.read_adapter(self.adapter)
            base = models.resolve(self.id, self.revision, need="config")
            adapters.check_binding(
                adapter,
                self.id,
                self.revision,
                base_weights=base.path if base.has_safetensors or base.has_pickled else None,
                base_commit=base.commit,
            )
            shapes = catalog.model(self.id, self.revision).linear_shapes()
            adapters.check_against_base(adapter, self.id, shapes)
        except UserInputError as exc:
            raise ValueError(exc.message) from None
        return self

    @field_validator("id")
    @classmethod
    def id_is_known(cls, value: str, info: ValidationInfo) -> str:
        revision = info.data.get("revision")
        if revision is None:  # the revision itself is refused: its line says why
            return value
        try:
            catalog.model(value, revision)
        except UserInputError as exc:
            raise ValueError(exc.message) from None
        return value


class Reference(Input):
    """The configuration every other one is compared with, per model, in the same run."""

    quantization: Quantization = "none"
    kv_cache_dtype: KvCacheDtype = "auto"


Few = Field(min_length=1, max_length=MAX_AXIS_VALUES)


class Exclude(Input):
    """One exclusion: every field given must match (a value, or any of a list of values)."""

    model: (
        Annotated[str, Field(max_length=MAX_NAME)]
        | Annotated[list[Annotated[str, Field(max_length=MAX_NAME)]], Few]
        | None
    ) = None
    backend: Backend | Annotated[list[Backend], Few] | None = None
    quantization: Quantization | Annotated[list[Quantization], Few] | None = None
    kv_cache_dtype: KvCacheDtype | Annotated[list[KvCacheDtype], Few] | None = None
    batch: Batch | Annotated[list[Batch], Few] | None = None
    context: Context | Annotated[list[Context], Few] | None = None
    target: Target | Annotated[list[Target], Few] | None = None

    @model_validator(mode="after")
    def names_at_least_one_field(self) -> Exclude:
        if not self.model_dump(exclude_none=True):
            raise ValueError("an exclude entry must name at least one field")
        return self

    def matches(self, fields: dict[str, Any]) -> bool:
        for name, wanted in self.model_dump(exclude_none=True).items():
            allowed = wanted if isinstance(wanted, list) else [wanted]
            if fields[name] not in allowed:
                return False
        return True


_AUTO_KV: list[KvCacheDtype] = ["auto"]


class Scenario(Input):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=80)
    models: list[ModelRef] = Field(min_length=1, max_length=MAX_MODELS)
    backend: list[Backend] = Few
    # inference axes: required unless the scenario has a `training:` block (see inference_axes)
    quantization: list[Quantization] | None = Field(min_length=1, max_length=MAX_AXIS_VALUES)
    kv_cache_dtype: list[KvCacheDtype] = Field(
        default_factory=lambda: list(_AUTO_KV), min_length=1, max_length=MAX_AXIS_VALUES
    )
    batch: list[Batch] | None = Field(min_length=1, max_length=MAX_AXIS_VALUES)
    context: list[Context] | None = Field(min_length=1, max_length=MAX_AXIS_VALUES)
    output_tokens: int | None = Field(gt=0, le=MAX_OUTPUT_TOKENS)
    targets: list[Target] = Few
    repeats: int = Field(5, gt=0, le=MAX_REPEATS)
    warmups: int = Field(1, ge=0, le=MAX_WARMUPS)
    min_duration_s: float = Field(0.0, ge=0.0, le=MAX_MIN_DURATION_S)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    gpu: str | None = Field(None, max_length=MAX_NAME)  # catalog card the plan assumes
    exclude: list[Exclude] = Field(default_factory=list, max_length=MAX_EXCLUDES)
    reference: Reference = Reference()
    quality: QualitySettings = QualitySettings()
    # each engine's own options, by its name (harness.spec.engine_options; `vllm:` is read too)
    engines: EngineBlocks = Field(default_factory=EngineBlocks)
    # optional: each vLLM group is also measured behind a server (harness.modes.serving.spec)
    serving: modes.Serving | None = None
    # optional: fine-tuning step points (mode: training; harness.modes.training.spec)
    training: modes.Training | None = None
    # optional: layouts over several cards (tensor / pipeline / expert parallelism)
    parallel: Parallel | None = None
    # speculative decoding (harness.spec.speculative): "none", or a method's configuration
    speculative: list[SpeculativeEntry] = Field(
        default_factory=without_speculation, min_length=1, max_length=MAX_AXIS_VALUES
    )

    @field_validator("speculative")
    @classmethod
    def each_speculation_once(cls, value: list[Any]) -> list[Any]:
        return entries_once(value)

    @property
    def speculations(self) -> list[Speculative | None]:
        """The speculative configurations each inference configuration is measured with (None:
        without speculation, the keys of earlier runs)."""
        return [None if isinstance(s, str) else s for s in self.speculative]

    @property
    def layouts(self) -> list[Layout | None]:
        """The layouts each inference configuration is measured at ([None]: one card)."""
        return [None] if self.parallel is None else self.parallel.layouts()

    @model_validator(mode="before")
    @classmethod
    def old_engine_keys(cls, data: Any) -> Any:
        return renamed_keys(data)

    @field_validator("models", mode="before")
    @classmethod
    def model_strings_are_ids(cls, value: Any) -> Any:
        if isinstance(value, list) and len(value) <= MAX_MODELS:
            return [{"id": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("models")
    @classmethod
    def each_model_once(cls, value: list[ModelRef]) -> list[ModelRef]:
        seen: set[tuple[str, str, str, str | None]] = set()
        for m in value:
            if (m.id, m.revision, m.weights, m.adapter) in seen:
                random = ", weights random" if m.weights == "random" else ""
                raise ValueError(
                    f"model {excerpt(m.id)} (revision {excerpt(m.revision)}{random}) is listed "
                    "twice; list each model once"
                )
            seen.add((m.id, m.revision, m.weights, m.adapter))
        return value

    @field_validator("models")
    @classmethod
    def each_adapter_folder_once(cls, value: list[ModelRef]) -> list[ModelRef]:
        """One adapter folder written two ways (``lora``, ``./lora/``, a link to it) is one
        adapter listed twice: refused at the second entry's ``adapter`` line."""
        folders: dict[Path, int] = {}
        for i, m in enumerate(value):
            if m.adapter is None:
                continue
            folder = Path(m.adapter).expanduser().resolve()
            if folder in folders:
                first = value[folders[folder]].adapter
                raise located(
                    (i, "adapter"),
                    f"adapter {excerpt(m.adapter)} is the folder of models[{folders[folder]}]"
                    f".adapter ({excerpt(first)}), written another way; list each adapter once",
                    m.adapter,
                )
            folders[folder] = i
        return value

    @field_validator("backend", "quantization", "kv_cache_dtype", "batch", "context", "targets")
    @classmethod
    def no_duplicates(cls, value: list[Any] | None) -> list[Any] | None:
        return None if value is None else unique(value)

    @model_validator(mode="before")
    @classmethod
    def training_only_needs_no_inference_axes(cls, data: Any) -> Any:
        """With a `training:` block the inference axes may be left out (None: no inference
        point); without one each stays required (pydantic's own "required field is missing")."""
        if isinstance(data, dict) and any(data.get(m) is not None for m in modes.standalone()):
            return {**{n: None for n in INFERENCE_AXES}, **data}
        return data

    @model_validator(mode="after")
    def inference_axes(self) -> Scenario:
        """quantization, batch, context and output_tokens: all given (inference points), or
        none of them in a scenario with a `training:` block (training points only)."""
        names = INFERENCE_AXES
        missing = [n for n in names if getattr(self, n) is None]
        if self.training is None and missing:
            raise ValueError(
                f"missing {', '.join(missing)}: a scenario without a `training:` block measures "
                f"inference and needs {', '.join(names)}"
            )
        if self.training is not None and missing and len(missing) < len(names):
            raise ValueError(
                f"missing {', '.join(missing)}: give all of {', '.join(names)} (inference points "
                "beside the training ones) or none of them (training points only)"
            )
        return self

    @property
    def has_inference(self) -> bool:
        return all(getattr(self, n) is not None for n in INFERENCE_AXES)

    @model_validator(mode="after")
    def grid_is_bounded(self) -> Scenario:
        base = len(self.models) * len(self.backend) * len(self.targets)
        cells = 0
        if self.has_inference:
            axes = (self.quantization or [], self.kv_cache_dtype, self.batch or [])
            cells = base * len(self.context or []) * len(self.layouts) * len(self.speculative)
            for axis in axes:
                cells *= len(axis)
        if self.training is not None:
            cells += base * self.training.cells
        if cells > MAX_GRID_POINTS:
            raise ValueError(
                f"the grid has {cells:,} cells; the limit is {MAX_GRID_POINTS:,} "
                "(split the scenario or use fewer values)"
            )
        return self

    @field_validator("gpu")
    @classmethod
    def gpu_is_in_catalog(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                catalog.gpu(value)
            except UserInputError as exc:
                raise ValueError(exc.message) from None
        return value


INFERENCE_AXES = ("quantization", "batch", "context", "output_tokens")


# The fields that say which configuration a point measures (the rest of a Point says how:
# repeats, warmups, seed, quality windows). Rows are matched, grouped and published by these.
CONFIGURATION_FIELDS = (
    "model",
    "revision",
    "backend",
    "quantization",
    "kv_cache_dtype",
    "batch",
    "context",
    "output_tokens",
    "target",
    "weights",
    "adapter",
    "layout",
    "speculative",
)


class Point(Strict):
    """One cell of the grid. Its key (fields + harness version + corpus hash) names its file."""

    model: str
    revision: str = "main"
    weights: Weights = "checkpoint"
    adapter: str | None = None  # a LoRA folder on the model (harness.spec.adapters)
    backend: Backend
    quantization: Quantization
    kv_cache_dtype: KvCacheDtype
    batch: PositiveInt
    context: PositiveInt
    output_tokens: NonNegativeInt  # 0 on a training point (nothing is generated)
    target: Target
    repeats: PositiveInt = 5
    warmups: NonNegativeInt = 1
    min_duration_s: float = 0.0
    seed: int = 0
    window_tokens: PositiveInt = 256
    max_windows: PositiveInt | None = 64
    # a load level behind a server (mode: serving); None: measured offline in-process
    serving: modes.ServingLevel | None = None
    # a fine-tuning configuration (mode: training): batch is its micro-batch, context its seq_len
    training: modes.TrainingPoint | None = None
    # tensor / pipeline / expert parallelism over several cards; None: one card
    layout: Layout | None = None
    # speculative decoding (harness.spec.speculative), written as its label; None: without
    speculative: Speculative | None = None
    # the content of the files it reads (harness.spec.inputs): (what, sha256 prefix) of its
    # adapter's weights, its task files, its trace; stamped by `expand` (`point_inputs`)
    inputs: tuple[tuple[str, str], ...] = ()

    @property
    def mode(self) -> str:
        """The mode whose payload the point carries (harness.modes.payloads; the last one wins,
        as a point carries one), else the mode without a payload (offline)."""
        carried = [m for m in modes.payloads() if getattr(self, m) is not None]
        return carried[-1] if carried else modes.without_payload()

    def key(self, corpus_hash: str) -> str:
        fields = self.model_dump()
        if fields["weights"] == "checkpoint":  # checkpoint keys stay those of earlier runs
            del fields["weights"]
        if fields["adapter"] is None:  # keys without an adapter stay those of earlier runs
            del fields["adapter"]
        if fields.get("layout") is None:  # one-card keys stay those of earlier runs
            fields.pop("layout", None)
        if fields.get("speculative") is None:  # keys without speculation stay those of before
            fields.pop("speculative", None)
        if not fields["inputs"]:  # keys of points that read no file stay those of earlier runs
            del fields["inputs"]
        for name in modes.payloads():  # the keys of the other modes' points stay as they were
            payload = getattr(self, name)
            if payload is None:
                del fields[name]
                continue
            fields["mode"] = name
            for omitted in getattr(payload, "KEY_OMITS_WHEN_FALSE", ()):
                if not fields[name].get(omitted):  # keys stay those of earlier runs
                    fields[name].pop(omitted, None)
        payload = json.dumps(
            {**fields, "harness": __version__, "corpus": corpus_hash}, sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:20]

    @property
    def group(self) -> GroupKey:
        """The group this point is loaded in: its fields that GroupKey names (a mode's payload
        that GroupKey names, by its label: a training point's configuration)."""
        by_label = [m for m in modes.payloads() if m in GroupKey.model_fields]
        shared = {f: getattr(self, f) for f in GroupKey.model_fields if f not in by_label}
        labels = {m: None if getattr(self, m) is None else getattr(self, m).label for m in by_label}
        return GroupKey(**shared, **labels)


class GroupKey(Strict):
    """Points that share a loaded model: loaded once, then every (batch, context) point."""

    target: Target
    model: str
    revision: str
    backend: Backend
    quantization: Quantization
    kv_cache_dtype: KvCacheDtype
    weights: Weights = "checkpoint"
    # a training point's configuration label: each training point is a group of its own (a fresh
    # model per run of the optimizer); None for inference groups
    training: str | None = None
    adapter: str | None = None  # the LoRA folder loaded on the model (harness.spec.adapters)
    layout: Layout | None = None  # its cards (tensor / pipeline / expert ranks); None: one
    # its speculative decoding (harness.spec.speculative): a draft is loaded with the model
    speculative: Speculative | None = None

    @property
    def cards(self) -> int:
        """The cards the group holds while it runs."""
        return 1 if self.layout is None else self.layout.cards

    @property
    def label(self) -> str:
        model = model_key(self.model, self.revision)
        parts = (model, self.backend, self.quantization, f"kv={self.kv_cache_dtype}")
        random = ("weights=random",) if self.weights == "random" else ()
        lora = (f"adapter={adapter_label(self.adapter)}",) if self.adapter is not None else ()
        train = (self.training,) if self.training is not None else ()
        layout = (self.layout.label,) if self.layout is not None else ()
        spec = (f"spec={self.speculative.label}",) if self.speculative is not None else ()
        return "|".join((*parts, *random, *lora, *train, *layout, *spec, self.target))


class Skip(Strict):
    point: Point
    reason: str


class Grid(Strict):
    scenario: Scenario
    points: list[Point]
    skipped: list[Skip]


def expand(scenario: Scenario, source: str | None = None) -> Grid:
    """Every mode's points (harness.modes, in registry order), minus exclusions and incompatible
    ones (with reasons). ``source`` names the scenario's file in errors found only once the
    models are known."""
    points: list[Point] = []
    skipped: list[Skip] = []
    archs = {model_key(m.id, m.revision): catalog.model(m.id, m.revision) for m in scenario.models}
    check_quality_windows(scenario, archs, source)
    tasks = inputs.task_files(scenario.quality.tasks or [])
    for mode in modes.REGISTRY.values():
        mode_skip = mode.load("skip_reason") if mode.ref("skip_reason") else None
        with yamlinput.fields_of(source):  # a field refused as its files are read: its line
            for made in mode.load("points")(scenario, points):  # it sees the points before it
                point = made.model_copy(update={"inputs": inputs.pairs(point_inputs(made, tasks))})
                arch = archs[model_key(point.model, point.revision)]
                why = skip_reason(scenario, point, arch) or (mode_skip and mode_skip(point, arch))
                if why:
                    skipped.append(Skip(point=point, reason=why))
                else:
                    points.append(point)
    return Grid(scenario=scenario, points=points, skipped=skipped)


def point_inputs(point: Point, tasks: list[inputs.InputFile]) -> tuple[inputs.InputFile, ...]:
    """The files ``point`` reads, by content (harness.spec.inputs): its model's and its draft's
    local folders (config and weights), its adapter's weights, the
    scenario's task files ``tasks`` (scored on an offline point on checkpoint weights), and what
    its mode's ``inputs`` part names (a serving workload's trace)."""
    folders = [inputs.model_folder_file("model", point.model)]
    draft = getattr(point.speculative, "model", None)
    if draft is not None:
        folders.append(inputs.model_folder_file("draft", draft))
    files = [f for f in folders if f is not None]
    if point.adapter is not None:
        files.append(inputs.adapter_file(point.adapter))
    if point.mode == "offline" and point.weights == "checkpoint":
        files += tasks
    mode = modes.get(point.mode)
    if mode.ref("inputs") is not None:
        files += inputs.mode_files(mode.load("inputs")(point))
    return tuple(files)


def check_quality_windows(
    scenario: Scenario, archs: dict[str, catalog.ModelArch], source: str | None
) -> None:
    """A quality window is scored whole, so it must fit the positions of every model whose
    quality is measured (checkpoint weights, inference points): refused at plan time."""
    if not scenario.has_inference:
        return
    window = scenario.quality.window_tokens
    for m in scenario.models:
        positions = archs[model_key(m.id, m.revision)].max_positions
        if m.weights == "checkpoint" and window > positions:
            raise UserInputError(
                f"{window} tokens per quality window exceed {m.id}'s max_position_embeddings "
                f"({positions}); use window_tokens <= {positions}",
                file=source,
                field="quality.window_tokens",
            )


def skip_reason(scenario: Scenario, point: Point, arch: catalog.ModelArch) -> str | None:
    fields = point.model_dump()
    for i, rule in enumerate(scenario.exclude):
        if rule.matches(fields):
            return f"excluded by the scenario (exclude[{i}])"
    broken = rule_for(fields)
    if broken:
        return f"{broken.reason} [rule {broken.id}]"
    layout_broken = point.layout and layout_rule_for(point.layout, arch, point.backend)
    if layout_broken:
        return f"{layout_broken[1]} [rule {layout_broken[0]}]"
    spec_broken = point.speculative and speculation_rule_for(
        point.speculative, point.backend, point.target, arch, point.layout
    )
    if spec_broken:
        return f"{spec_broken[1]} [rule {spec_broken[0]}]"
    if point.weights == "random" and not random_weights_can_be(point.quantization, point.backend):
        return (
            f"random weights are built in a float dtype; {point.quantization} needs a checkpoint "
            "[rule random-weights-float]"
        )
    if point.adapter is not None and point.backend == "vllm" and point.mode == "offline":
        return f"{adapters.VLLM_NO_LORA_PROMPT_LOGPROBS} [rule vllm-lora-no-prompt-logprobs]"
    needed = point.context + point.output_tokens
    if needed > arch.max_positions:
        return (
            f"context + output_tokens = {needed} exceeds the model's max_position_embeddings "
            f"({arch.max_positions}) [rule max-positions]"
        )
    return None


def random_weights_can_be(quantization: str, backend: str) -> bool:
    """Random weights come in the model's float dtypes; vLLM also quantizes them to fp8 online."""
    fmt = WEIGHT_FORMATS[quantization]
    return not fmt.quantizes_linears or (backend == "vllm" and quantization == "fp8")


def reference_point(scenario: Scenario, point: Point) -> Point:
    """The point's counterpart in the reference configuration (same shape, same target)."""
    return point.model_copy(
        update={
            "quantization": scenario.reference.quantization,
            "kv_cache_dtype": scenario.reference.kv_cache_dtype,
        }
    )


# --- loading ---------------------------------------------------------------------------------


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file; every error is a UserInputError with file and line."""
    return load_model(path, Scenario, "scenario")


def parse(text: str, filename: str = "<scenario>") -> Scenario:
    return parse_model(text, Scenario, filename, "scenario")
