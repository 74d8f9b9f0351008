#!/usr/bin/env bash
# ON THE GPU NODE, in the repository copy, after the last vLLM part was stashed: the worker path
# of issues 13-15 on the card, each step a `harness measure` of its own process (a second vLLM
# engine in one process dies in vLLM 0.26's profiling run), each under its own time limit.
# Writes under $OUT: <step>/ (the run folder: points/, manifest.json), <step>.log, node.txt.
#
# The calls (one part per call; tree + part + both checksum files stay under 64 MiB; print the
# sizes with `SIZES_ONLY=1 bash scripts/gpu/build_vllm_bundle.sh`):
#   call 1: bash scripts/gpu/stash_part.sh 00
#           carry: .vllm-bundle/parts/vllm026-slim.tar.xz.part00 .vllm-bundle/parts/vllm026-slim.sha256
#                  .vllm-bundle/parts/vllm026-slim.parts.sha256
#   call 2: bash scripts/gpu/stash_part.sh 01          (carry: part01 + the two sha256 files)
#   call 3: bash scripts/gpu/stash_part.sh 02 && bash scripts/gpu/node_campaign.sh [STEP...]
#           carry: part02 + the two sha256 files + .vllm-bundle/extra (peft, for training)
# (More parts after a rebuild: one more stash call each; the campaign rides with the last.)
#
# Steps: energy (tiny model, both engines, NVML energy per phase), serving (`vllm serve` +
# `vllm bench serve` on the card), training (scenarios/gpu-training.yaml: full / LoRA on CUDA;
# peft carried as its wheel in .vllm-bundle/extra), energy-8b (the Llama-3.1-8B architecture on random weights,
# vLLM, batch 1 and 64).
# Before the serving step, scripts/gpu/serving_imports.py checks with the node's Python that what
# `vllm serve` and `vllm bench serve` import is there (the bundle carries the serving wheels of
# scripts/gpu/vllm026-serving-deps.txt); its `serving-imports:` lines go to node.txt and
# serving.log. When something is missing the step is skipped (SERVING_FORCE=1 runs it anyway)
# and the missing module names are printed.
set -uo pipefail
OUT=${OUT:-results/gpu-campaign}
source "$(dirname "${BASH_SOURCE[0]}")/node_env.sh"
extra=$(ls "$ROOT"/.vllm-bundle/extra/*.whl 2>/dev/null | tr '\n' ':')
export PYTHONPATH="$ROOT:${extra}${PYTHONPATH:-}"   # pure-python wheels import from the zip
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false

# Issue 15's figures first; the limits add up to 580 s so that the call (600 s at most) returns
# what is under $OUT even when a step runs to its limit. Serving: 3 levels × 128 requests plus a
# server start (vLLM 0.26 compiles and captures CUDA graphs: ~60-90 s).
declare -A LIMIT=([energy]=140 [energy-8b]=140 [serving]=200 [training]=100)
declare -A SCENARIO=([energy]=scenarios/gpu/energy.yaml [serving]=scenarios/gpu/serving.yaml
  [training]=scenarios/gpu-training.yaml [energy-8b]=scenarios/gpu/energy-8b.yaml)
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(energy energy-8b serving training)
cd "$ROOT" || exit 1
for step in "${steps[@]}"; do
  began=$(date +%s)
  : >"$OUT/$step.log"
  if [[ $step == serving ]]; then
    # What `vllm serve` / `vllm bench serve` import, checked with the same Python and PYTHONPATH.
    timeout 120 "$PYTHON" "$HERE/serving_imports.py" >"$OUT/serving-imports.txt" 2>"$OUT/serving-imports.err"
    imports_rc=$?
    grep '^serving-imports:' "$OUT/serving-imports.txt" >>"$OUT/node.txt"
    summary=$(grep '^serving-imports: summary' "$OUT/serving-imports.txt" || echo "serving-imports: summary ERROR (rc=$imports_rc, no summary: see serving-imports.err)")
    echo "[campaign] $summary"
    if [[ $imports_rc -ne 0 && ${SERVING_FORCE:-0} != 1 ]]; then
      { cat "$OUT/serving-imports.txt"; tail -n 20 "$OUT/serving-imports.err"; } >>"$OUT/$step.log"
      echo "[campaign] $step skipped: its imports fail (SERVING_FORCE=1 runs it anyway); see $OUT/node.txt"
      continue
    fi
    cat "$OUT/serving-imports.txt" >>"$OUT/$step.log"
  fi
  timeout "${LIMIT[$step]:-150}" "$PYTHON" -m harness.cli.main measure "${SCENARIO[$step]}" \
    --out "$OUT/$step" >>"$OUT/$step.log" 2>&1
  rc=$?
  echo "[campaign] $step rc=$rc in $(( $(date +%s) - began )) s"
  grep -E "points by status|Error|error:" "$OUT/$step.log" | tail -n 4
done
