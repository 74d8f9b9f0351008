#!/usr/bin/env bash
# ON THE GPU NODE, in the repository copy, after the last vLLM part was stashed: the worker path
# of issues 13-15 on the card, each step a `harness measure` of its own process (a second vLLM
# engine in one process dies in vLLM 0.26's profiling run), each under its own time limit.
# Writes under $OUT: <step>/ (the run folder: points/, manifest.json), <step>.log, node.txt.
#
#   bash scripts/gpu/stash_part.sh 02 && bash scripts/gpu/node_campaign.sh [STEP...]
#
# Steps: energy (tiny model, both engines, NVML energy per phase), serving (`vllm serve` +
# `vllm bench serve` on the card), training (scenarios/gpu-training.yaml: full / LoRA on CUDA;
# peft carried as its wheel in .vllm-bundle/extra), energy-8b (the Llama-3.1-8B architecture on random weights,
# vLLM, batch 1 and 64).
set -uo pipefail
OUT=${OUT:-results/gpu-campaign}
source "$(dirname "${BASH_SOURCE[0]}")/node_env.sh"
extra=$(ls "$ROOT"/.vllm-bundle/extra/*.whl 2>/dev/null | tr '\n' ':')
export PYTHONPATH="$ROOT:${extra}${PYTHONPATH:-}"   # pure-python wheels import from the zip
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false

declare -A LIMIT=([energy]=150 [serving]=150 [training]=150 [energy-8b]=150)
declare -A SCENARIO=([energy]=scenarios/gpu/energy.yaml [serving]=scenarios/gpu/serving.yaml
  [training]=scenarios/gpu-training.yaml [energy-8b]=scenarios/gpu/energy-8b.yaml)
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(energy serving training energy-8b)
cd "$ROOT" || exit 1
for step in "${steps[@]}"; do
  began=$(date +%s)
  timeout "${LIMIT[$step]:-150}" "$PYTHON" -m harness.cli.main measure "${SCENARIO[$step]}" \
    --out "$OUT/$step" >"$OUT/$step.log" 2>&1
  rc=$?
  echo "[campaign] $step rc=$rc in $(( $(date +%s) - began )) s"
  grep -E "points by status|Error|error:" "$OUT/$step.log" | tail -n 4
done
