"""Scenario YAML → validated Scenario → grid of Points (and skips, each with its reason).

The YAML shape is a contract (see README). Validation happens before anything runs; errors name
the file, the line, the field path, what was expected and, for near misses, what was meant.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    field_validator,
    model_validator,
)

from harness import __version__
from harness.errors import UserInputError
from harness.spec import catalog
from harness.spec.capabilities import (
    Backend,
    KvCacheDtype,
    Quantization,
    Target,
)
from harness.spec.compat import rule_for
from harness.spec.yamlinput import load_model, parse_model


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRef(Strict):
    id: str = Field(min_length=1)
    revision: str = "main"

    @field_validator("id")
    @classmethod
    def id_is_known(cls, value: str) -> str:
        try:
            catalog.model(value)
        except UserInputError as exc:
            raise ValueError(exc.message) from None
        return value


class Reference(Strict):
    """The configuration every other one is compared with, per model, in the same run."""

    quantization: Quantization = "none"
    kv_cache_dtype: KvCacheDtype = "auto"


class QualitySettings(Strict):
    window_tokens: PositiveInt = 256
    max_windows: PositiveInt | None = 64  # None = every window of the corpus
    arc_items: NonNegativeInt = 100
    bootstrap_samples: PositiveInt = 1000


class VllmOptions(Strict):
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0)
    enforce_eager: bool = False
    max_model_len: PositiveInt | None = None


class Exclude(Strict):
    """One exclusion: every field given must match (a value, or any of a list of values)."""

    model: str | list[str] | None = None
    backend: Backend | list[Backend] | None = None
    quantization: Quantization | list[Quantization] | None = None
    kv_cache_dtype: KvCacheDtype | list[KvCacheDtype] | None = None
    batch: PositiveInt | list[PositiveInt] | None = None
    context: PositiveInt | list[PositiveInt] | None = None
    target: Target | list[Target] | None = None

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


def _unique(values: list[Any]) -> list[Any]:
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise ValueError(f"duplicate value {seen[0]!r}")
    return values


class Scenario(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=80)
    models: list[ModelRef] = Field(min_length=1)
    backend: list[Backend] = Field(min_length=1)
    quantization: list[Quantization] = Field(min_length=1)
    kv_cache_dtype: list[KvCacheDtype] = Field(default_factory=lambda: list(_AUTO_KV), min_length=1)
    batch: list[PositiveInt] = Field(min_length=1)
    context: list[PositiveInt] = Field(min_length=1)
    output_tokens: PositiveInt
    targets: list[Target] = Field(min_length=1)
    repeats: PositiveInt = 5
    warmups: NonNegativeInt = 1
    min_duration_s: float = Field(0.0, ge=0.0)
    seed: int = 0
    gpu: str | None = None  # catalog card the plan assumes for GPU targets
    exclude: list[Exclude] = Field(default_factory=list)
    reference: Reference = Reference()
    quality: QualitySettings = QualitySettings()
    vllm: VllmOptions = VllmOptions()

    @field_validator("models", mode="before")
    @classmethod
    def model_strings_are_ids(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"id": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("backend", "quantization", "kv_cache_dtype", "batch", "context", "targets")
    @classmethod
    def no_duplicates(cls, value: list[Any]) -> list[Any]:
        return _unique(value)

    @field_validator("gpu")
    @classmethod
    def gpu_is_in_catalog(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                catalog.gpu(value)
            except UserInputError as exc:
                raise ValueError(exc.message) from None
        return value


class Point(Strict):
    """One cell of the grid. Its key (fields + harness version + corpus hash) names its file."""

    model: str
    revision: str = "main"
    backend: Backend
    quantization: Quantization
    kv_cache_dtype: KvCacheDtype
    batch: PositiveInt
    context: PositiveInt
    output_tokens: PositiveInt
    target: Target
    repeats: PositiveInt = 5
    warmups: NonNegativeInt = 1
    min_duration_s: float = 0.0
    seed: int = 0
    window_tokens: PositiveInt = 256
    max_windows: PositiveInt | None = 64

    def key(self, corpus_hash: str) -> str:
        payload = json.dumps(
            {**self.model_dump(), "harness": __version__, "corpus": corpus_hash}, sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:20]

    @property
    def group(self) -> GroupKey:
        return GroupKey(
            target=self.target,
            model=self.model,
            revision=self.revision,
            backend=self.backend,
            quantization=self.quantization,
            kv_cache_dtype=self.kv_cache_dtype,
        )


class GroupKey(Strict):
    """Points that share a loaded model: loaded once, then every (batch, context) point."""

    target: Target
    model: str
    revision: str
    backend: Backend
    quantization: Quantization
    kv_cache_dtype: KvCacheDtype

    @property
    def label(self) -> str:
        parts = (self.model, self.backend, self.quantization, f"kv={self.kv_cache_dtype}")
        return "|".join((*parts, self.target))


class Skip(Strict):
    point: Point
    reason: str


class Grid(Strict):
    scenario: Scenario
    points: list[Point]
    skipped: list[Skip]


def expand(scenario: Scenario) -> Grid:
    """Every combination of the axes, minus exclusions and incompatible ones (with reasons)."""
    points: list[Point] = []
    skipped: list[Skip] = []
    archs = {m.id: catalog.model(m.id) for m in scenario.models}
    for m, backend, quant, kv, batch, context, target in itertools.product(
        scenario.models,
        scenario.backend,
        scenario.quantization,
        scenario.kv_cache_dtype,
        scenario.batch,
        scenario.context,
        scenario.targets,
    ):
        point = Point(
            model=m.id,
            revision=m.revision,
            backend=backend,
            quantization=quant,
            kv_cache_dtype=kv,
            batch=batch,
            context=context,
            output_tokens=scenario.output_tokens,
            target=target,
            repeats=scenario.repeats,
            warmups=scenario.warmups,
            min_duration_s=scenario.min_duration_s,
            seed=scenario.seed,
            window_tokens=scenario.quality.window_tokens,
            max_windows=scenario.quality.max_windows,
        )
        reason = skip_reason(scenario, point, archs[m.id])
        if reason:
            skipped.append(Skip(point=point, reason=reason))
        else:
            points.append(point)
    return Grid(scenario=scenario, points=points, skipped=skipped)


def skip_reason(scenario: Scenario, point: Point, arch: catalog.ModelArch) -> str | None:
    fields = point.model_dump()
    for i, rule in enumerate(scenario.exclude):
        if rule.matches(fields):
            return f"excluded by the scenario (exclude[{i}])"
    broken = rule_for(fields)
    if broken:
        return f"{broken.reason} [rule {broken.id}]"
    needed = point.context + point.output_tokens
    if needed > arch.max_positions:
        return (
            f"context + output_tokens = {needed} exceeds the model's max_position_embeddings "
            f"({arch.max_positions}) [rule max-positions]"
        )
    return None


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
