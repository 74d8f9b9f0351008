"""The case issue 47 exists for: a KV cache whose error grows with position (noise added to the
keys and values stored past position FROM, growing with the distance) passes the perplexity gate
on 256-token windows (never that far) and fails the long-context gate at the longer context,
on the shipped retrieval model through the real transformers backend."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from harness.backends.base import BackendOptions
from harness.measure import quality, verdict
from harness.results import context_gate
from harness.spec.quality import QualitySettings
from harness.spec.scenario import GroupKey

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "harness" / "data" / "tiny-llama-retrieval"
FROM = 600  # positions from here on get noise
SIGMA = 6.0  # noise sd at position 2 × FROM, in units of the stored tensor's own sd
SHORT, LONG = 512, 1024
ITEMS = 8


def noisy_cache_class() -> Any:
    import torch
    from transformers import DynamicCache

    class NoisyCache(DynamicCache):  # type: ignore[misc]
        """A model-dtype cache that adds seeded Gaussian noise to what it stores past FROM:
        sd = SIGMA × (position − FROM) / FROM × the stored tensor's sd."""

        def update(self, key_states: Any, value_states: Any, layer_idx: int, *args: Any,
                   **kwargs: Any) -> Any:  # fmt: skip
            offsets = self.__dict__.setdefault("_offsets", {})
            start = offsets.get(layer_idx, 0)
            n = key_states.shape[-2]
            offsets[layer_idx] = start + n
            pos = torch.arange(start, start + n, dtype=torch.float32)
            scale = (pos - FROM).clamp(min=0) / FROM * SIGMA
            if bool(scale.any()):
                gen = torch.Generator().manual_seed(1009 * layer_idx + start)
                shape = key_states.shape
                grow = scale[None, None, :, None]
                key_states = (
                    key_states + torch.randn(shape, generator=gen) * grow * key_states.std()
                )
                value_states = (
                    value_states + torch.randn(shape, generator=gen) * grow * value_states.std()
                )
            return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    return NoisyCache


def loaded(noisy: bool) -> Any:
    from harness.backends.transformers.backend import TransformersBackend

    group = GroupKey(
        target="cpu", model="tiny-llama-retrieval", revision="main", backend="transformers",
        quantization="none", kv_cache_dtype="auto",
    )  # fmt: skip
    backend = TransformersBackend(group, BackendOptions(device="cpu", model_path=str(MODEL)))
    backend.load()
    if noisy:
        cls = noisy_cache_class()
        backend._new_cache = types.MethodType(lambda self: cls(config=self.model.config), backend)
    return backend


@pytest.mark.skipif(not (MODEL / "model.safetensors").is_file(), reason="no retrieval model")
def test_noise_growing_past_a_position_passes_256_token_windows_and_fails_at_long_context() -> None:
    from harness import corpus
    from harness.modes.offline.device.run import measure_tasks

    settings = QualitySettings.model_validate({
        "arc_items": 0,
        "tasks": [{"longctx": "single_needle", "contexts": [SHORT, LONG], "items": ITEMS,
                   "question": "agnostic", "tokenizer": str(MODEL)}],
    })  # fmt: skip
    tasks = settings.scored_tasks()
    ref_backend, bad_backend = loaded(noisy=False), loaded(noisy=True)
    tokens = corpus.tokenize_eval(str(MODEL))
    windows = corpus.windows(tokens, 256, 16)
    ref_w = ref_backend.score_windows(windows, None, 4)
    bad_w = bad_backend.score_windows(windows, None, 4)
    # 256-token windows never reach position FROM: the same NLL, ΔNLL 0 ± 0, a pass at class 99
    ppl = verdict.dnll_interval(ref_w.nll_sum, bad_w.nll_sum, ref_w.tokens, bad_w.tokens)
    assert verdict.decide(ppl.low, ppl.high, verdict.ppl_margin(0.99)) == "pass"
    assert quality.perplexity(ref_w.nll_sum, ref_w.tokens) == quality.perplexity(
        bad_w.nll_sum, bad_w.tokens
    )

    _, arrays = measure_tasks(ref_backend, tasks, None, reference=True)
    ref = types.SimpleNamespace(task_arrays=arrays)
    bad_part, _ = measure_tasks(bad_backend, tasks, ref)  # type: ignore[arg-type]
    judged = context_gate.context_verdicts([t.model_dump() for t in bad_part.tasks], 0.99)
    by = {j.context: j for j in judged}
    # below FROM nothing changed: no flip, ΔNLL exactly 0: not a fail (undecided only for the
    # exact-match interval of 8 items); past FROM the answers' NLL rises beyond −ln 0.99
    assert by[SHORT].verdict != "fail" and by[SHORT].items == ITEMS
    assert by[LONG].verdict == "fail" and by[LONG].items == ITEMS
    short = next(c for c in bad_part.tasks[0].categories if c.category == f"ctx-{SHORT}")
    assert short.dnll == 0.0
