#!/usr/bin/env bash
# CI: the rented GPU node's install path, built on this CPU machine (no GPU is used).
#
#   bash .ci/gpu-venv.sh          (.ci/run calls it after .ci/images.sh)
#
# `make venv ACCEL=cuda VENV=.venv-cuda` (vLLM's CUDA wheel and its torch, the rest of the lock
# around them), then in that venv: `pip check`, import both engines, `harness plan` every GPU
# scenario, and build the installed vLLM's own EngineArgs for every vLLM group of them
# (.ci/gpu_engine_args.py), so an engine argument this vLLM does not know fails here. Prints the
# transformers of both venvs: the GPU venv takes vLLM's, the CPU venv the lock's.
# Skipped with one line when the disk has under 20 GB free (the venv is about 11 GB) or with
# HARNESS_CI_GPU_VENV=0. The venv is removed at the end unless HARNESS_CI_GPU_VENV_KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${HARNESS_CI_GPU_VENV_DIR:-.venv-cuda}"
NEED_GB=20
skip() {
    echo "gpu-venv: skipped: $*"
    exit 0
}
[[ "${HARNESS_CI_GPU_VENV:-1}" == "0" ]] && skip "HARNESS_CI_GPU_VENV=0"
free_gb=$(df -Pk . | awk 'NR == 2 { printf "%d", $4 / 1048576 }')
((free_gb >= NEED_GB)) || skip "${free_gb} GB free here; the CUDA venv needs ${NEED_GB} GB (GB = 2^30 bytes)"

T0=$(date +%s)
cleanup() {
    local rc=$?
    if [[ "${HARNESS_CI_GPU_VENV_KEEP:-0}" != "1" ]]; then rm -rf "${VENV}" "${VENV}-sglang"; fi
    echo "gpu-venv: total $(($(date +%s) - T0)) s; exit ${rc}"
}
trap cleanup EXIT

t=$(date +%s)
make -s --no-print-directory venv ACCEL=cuda VENV="${VENV}" > /tmp/gpu-venv-make.log 2>&1 \
    || { tail -30 /tmp/gpu-venv-make.log; exit 1; }
echo "gpu-venv: make venv ACCEL=cuda took $(($(date +%s) - t)) s, $(du -sh "${VENV}" | cut -f1) on disk"
"${VENV}/bin/python" -m pip check
"${VENV}/bin/python" -c '
import torch, transformers, vllm
print(f"gpu-venv: vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")'
scenarios=(scenarios/gpu*.yaml scenarios/gpu/*.yaml)
for scenario in "${scenarios[@]}"; do
    "${VENV}/bin/harness" plan "${scenario}" > /dev/null || { echo "gpu-venv: harness plan ${scenario} failed" >&2; exit 1; }
done
echo "gpu-venv: harness plan ok for ${#scenarios[@]} GPU scenarios"
"${VENV}/bin/python" .ci/gpu_engine_args.py "${scenarios[@]}" 2> >(grep -v -E '^(INFO|WARNING|W[0-9]{4}|Failed to load)' >&2)
gpu_tf=$("${VENV}/bin/python" -m pip show transformers 2>/dev/null | sed -n 's/^Version: //p')
cpu_tf=$(sed -n 's/^transformers==//p' requirements/cpu.lock.txt)
echo "gpu-venv: transformers ${gpu_tf} in the GPU venv, ${cpu_tf} in the CPU lock$([[ "${gpu_tf}" == "${cpu_tf}" ]] || echo ': they differ')"
# SGLang in a venv of its own (it pins torch 2.14.1, vLLM 0.33 pins 2.14.0): its arguments for every
# SGLang group, checked by its own ServerArgs and launch_server parser (.ci/gpu_engine_args.py)
# The vLLM venv (about 11 GB) goes before the SGLang one (about 11 GB) is built, unless kept.
if [[ "${HARNESS_CI_GPU_VENV_KEEP:-0}" != "1" ]]; then rm -rf "${VENV}"; fi
free_gb=$(df -Pk . | awk 'NR == 2 { printf "%d", $4 / 1048576 }')
((free_gb >= 12)) || { echo "gpu-venv: ${free_gb} GB free for the SGLang venv, which needs 12 GB" >&2; exit 1; }
SGLANG_VENV="${VENV}-sglang"
t=$(date +%s)
python3 -m venv "${SGLANG_VENV}"
"${SGLANG_VENV}/bin/python" -m pip install -q -r requirements/gpu-sglang.txt > /tmp/gpu-venv-sglang.log 2>&1 \
    || { tail -30 /tmp/gpu-venv-sglang.log; exit 1; }
"${SGLANG_VENV}/bin/python" -m pip install -q --no-deps --no-build-isolation -e . >> /tmp/gpu-venv-sglang.log 2>&1
echo "gpu-venv: SGLang venv took $(($(date +%s) - t)) s"
"${SGLANG_VENV}/bin/python" .ci/gpu_engine_args.py --engine sglang "${scenarios[@]}" \
    2> >(grep -v -E '^(INFO|WARNING|W[0-9]{4}|Failed to load)' >&2)
