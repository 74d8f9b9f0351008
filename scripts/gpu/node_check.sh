#!/usr/bin/env bash
# ON THE GPU NODE, in the repository copy, after the last part was stashed: unpack the vLLM
# bundle, then run scripts/gpu_check.py (both engines on the tiny model, vLLM's FP8 KV caches,
# the Llama-3.1-8B architecture on random weights) with the node's own torch. Writes under $OUT:
# gpu_check.json (rewritten after every step), node.txt (versions and preflight), gpu_check.log.
#
#   bash scripts/gpu/stash_part.sh 02 && bash scripts/gpu/node_check.sh
set -uo pipefail
OUT=${OUT:-results/gpu-check}
source "$(dirname "${BASH_SOURCE[0]}")/node_env.sh"
export PYTHONPATH="$ROOT:${PYTHONPATH:-}"
{
  echo "python: $PYTHON ($($PYTHON -V 2>&1))"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  $PYTHON - <<'PY' 2>&1
import importlib
for name in ("torch", "transformers", "vllm", "pydantic", "numpy", "pynvml", "typer", "yaml"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"), getattr(module, "__file__", ""))
    except Exception as exc:
        print(name, "MISSING", type(exc).__name__, exc)
PY
} >>"$OUT/node.txt"
cd "$ROOT" && timeout "${CHECK_TIMEOUT:-480}" "$PYTHON" scripts/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_check.log" | grep -E '^\[gpu-check\]|Error|error' | tail -40
exit "${PIPESTATUS[0]}"
