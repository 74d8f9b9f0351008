"""Real vLLM CPU at tp=1 and tp=2 on the shipped tiny model: the same greedy text, and the same
per-window NLL within numerical noise (harness.backends.vllm at a layout, as a group runs it).

Each layout runs in a fresh process (a script with a main guard: vLLM's "mp" executor starts a
process per rank, and a process that already ran an in-process engine keeps one torch thread).
The tp=2 process binds a core per rank (VLLM_CPU_OMP_THREADS_BIND="0|1",
harness.backends.vllm.args.engine_environment); a machine with fewer than 2 cores skips.

Tolerance: |ΔNLL| ≤ 1e-4 nats per token on every window. In fp32, splitting each matmul over 2
ranks and all-reducing the halves only reorders float additions (relative error ~1e-7 per
operation); the harness measured a mean ΔNLL of -2.1e-8 nats/token over 4 windows (95 % CI
[-1.0e-7, 6.5e-8]) for this pair. 1e-4 is ten times below the strictest quality class's margin
(class 99.9: -ln 0.999 = 1.0005e-3 nats/token), so a pass here cannot hide a quality change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE_NATS_PER_TOKEN = 1e-4
PROMPT = "The history of the city"

SCRIPT = """
import json, sys
from harness.backends.vllm.options import VllmOptions
from harness.spec.engine_options import EngineBlocks
from harness import corpus
from harness.backends.base import BackendOptions
from harness.backends.vllm.backend import VllmBackend
from harness.spec import models
from harness.spec.capabilities import Layout
from harness.spec.scenario import GroupKey


def main() -> None:
    label = sys.argv[1]
    group = GroupKey(
        target="cpu", model="tiny-llama", revision="main", backend="vllm", quantization="fp32",
        kv_cache_dtype="auto", layout=None if label == "one" else Layout.model_validate(label),
    )
    path = str(models.PACKAGE_DATA / "tiny-llama")
    options = BackendOptions(
        device="cpu", model_path=path,
        engines=EngineBlocks(vllm=VllmOptions(enforce_eager=True, max_model_len=256)),
        max_context=256, kv_cache_bytes=64 * 2**20,
    )
    backend = VllmBackend(group, options)
    backend.load()
    try:
        text = backend.generate_text([sys.argv[2]], 16)
        windows = corpus.windows(corpus.tokenize_eval(path), 64, 4)
        scores = backend.score_windows(windows, None, 4)
        print("RESULT " + json.dumps({
            "text": text, "nll": scores.nll_sum.tolist(), "tokens": scores.tokens.tolist(),
        }))
    finally:
        backend.close()


if __name__ == "__main__":
    main()
"""


def run_layout(script: Path, label: str) -> dict[str, list[Any]]:
    done = subprocess.run(
        [sys.executable, str(script), label, PROMPT], cwd=ROOT, capture_output=True, text=True,
        timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result: dict[str, list[Any]] = json.loads(line.removeprefix("RESULT "))
    return result


@pytest.mark.slow  # two engine starts: about 1 to 3 minutes each on 2 shared cores
@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="tp=2 on the CPU binds a core per rank"
)
def test_tp2_gives_tp1s_greedy_text_and_nll_within_noise(tmp_path: Path) -> None:
    script = tmp_path / "layout.py"
    script.write_text(SCRIPT)
    one, two = run_layout(script, "one"), run_layout(script, "tp=2")
    assert one["text"] == two["text"] and one["text"][0]
    assert one["tokens"] == two["tokens"]
    for nll1, nll2, tokens in zip(one["nll"], two["nll"], one["tokens"], strict=True):
        per_token = (float(nll2) - float(nll1)) / float(tokens)
        assert abs(per_token) <= TOLERANCE_NATS_PER_TOKEN
