"""Offline points: every combination of the scenario's inference axes."""

from __future__ import annotations

import itertools

from harness.spec.scenario import Point, Scenario


def offline_points(scenario: Scenario, accepted: list[Point]) -> list[Point]:
    """One point per (model, backend, quantization, KV dtype, layout, speculative decoding,
    batch, context, target), in that order; none in a training-only scenario (its inference axes
    are None)."""
    return [
        Point(
            **m.point_fields(),
            backend=backend,
            quantization=quant,
            kv_cache_dtype=kv,
            batch=batch,
            context=context,
            output_tokens=scenario.output_tokens or 0,
            target=target,
            repeats=scenario.repeats,
            warmups=scenario.warmups,
            min_duration_s=scenario.min_duration_s,
            seed=scenario.seed,
            window_tokens=scenario.quality.window_tokens,
            max_windows=scenario.quality.max_windows,
            layout=layout,
            speculative=spec,
        )
        for m, backend, quant, kv, layout, spec, batch, context, target in itertools.product(
            scenario.models,
            scenario.backend,
            scenario.quantization or [],
            scenario.kv_cache_dtype,
            scenario.layouts,
            scenario.speculations,
            scenario.batch or [],
            scenario.context or [],
            scenario.targets,
        )
    ]
