"""Base vs adapter intent accuracy of the tiny model on the SNIPS SCORED split (this machine).

    .venv/bin/python scripts/snips_adapter_accuracy.py [--adapter DIR] [--backend transformers]

Each scored item (items 10-39 of each intent, 210 in all; never trained on) is scored with the
engine's own `Backend.score_continuations`: the log-likelihood of " <intent>" after the
snips-intent prompt, for each of the 7 intents; the argmax is the prediction. The adapter's
binding is checked against the base before it loads. Prints accuracy (%) per model, per intent,
and the paired adapter − base difference with its 90 % interval (Newcombe, paired:
harness.measure.verdict.accuracy_interval), in percentage points.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from harness.backends.base import BackendOptions, backend_class
from harness.measure.verdict import accuracy_interval
from harness.run.device import bound_adapter
from harness.spec import models
from harness.spec.scenario import GroupKey
from harness.tasks.builtin import SNIPS_INTENTS, builtin_task, snips_split
from harness.tasks.spec import label_continuation, render_prompt

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny-llama"


def hits(backend_name: str, adapter: str | None) -> tuple[NDArray[np.bool_], list[str], float]:
    """Per scored item: whether the highest-likelihood intent is the gold one; the items'
    intents; seconds taken."""
    group = GroupKey(target="cpu", model=MODEL, revision="main", backend=backend_name,
                     quantization="none", kv_cache_dtype="auto", adapter=adapter)  # fmt: skip
    base = models.resolve(MODEL)
    bound = bound_adapter(group, base)
    options = BackendOptions(
        device="cpu",
        model_path=str(base.path),
        adapter_path=str(bound.path) if bound else None,
        adapter_rank=bound.rank if bound else None,
        kv_cache_bytes=64 << 20,
        max_context=512,
    )
    backend = backend_class(backend_name)(group, options)
    started = time.perf_counter()
    backend.load()
    task = builtin_task("snips-intent")
    items = snips_split("scored")
    pairs = [
        (render_prompt(task, item), label_continuation(label))
        for item in items
        for label in SNIPS_INTENTS
    ]
    scores = np.array(backend.score_continuations(pairs)).reshape(len(items), len(SNIPS_INTENTS))
    backend.close()
    predicted = [SNIPS_INTENTS[i] for i in scores.argmax(axis=1)]
    gold = [item.category for item in items]
    return (
        np.array([p == g for p, g in zip(predicted, gold, strict=True)]),
        gold,
        time.perf_counter() - started,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", default=str(REPO / "harness/data/adapters/tiny-llama-snips"))
    parser.add_argument("--backend", default="transformers")
    args = parser.parse_args()
    base, gold, base_s = hits(args.backend, None)
    tuned, _, tuned_s = hits(args.backend, args.adapter)
    diff = accuracy_interval(base, tuned)  # reference − candidate: base − adapter
    per_intent = {
        intent: {
            "base_pct": round(100 * float(base[[g == intent for g in gold]].mean()), 1),
            "adapter_pct": round(100 * float(tuned[[g == intent for g in gold]].mean()), 1),
        }
        for intent in SNIPS_INTENTS
    }
    print(
        json.dumps(
            {
                "backend": args.backend,
                "items": len(gold),
                "base_accuracy_pct": round(100 * float(base.mean()), 1),
                "adapter_accuracy_pct": round(100 * float(tuned.mean()), 1),
                "adapter_minus_base_pp": round(-100 * diff.estimate, 1),
                "adapter_minus_base_90ci_pp": [
                    round(-100 * diff.high, 1),
                    round(-100 * diff.low, 1),
                ],
                "per_intent": per_intent,
                "seconds": {"base": round(base_s, 1), "adapter": round(tuned_s, 1)},
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
