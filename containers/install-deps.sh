#!/usr/bin/env bash
# The harness's non-engine dependencies, installed around a vLLM image's engine. Both GPU images
# (containers/cuda/Dockerfile, containers/rocm/Dockerfile) run this one script:
#
#   install-deps.sh [LOCK]        LOCK defaults to requirements/cpu.lock.txt
#
#  1. image.txt = every package the image ships, at its version (torch, vllm, transformers, aiter,
#                 amdsmi, ...), except ray, which must be the cluster's Ray on every node;
#  2. extra.txt = the lock's pins for packages the image does not have;
#  3. the harness's runtime requirements go in under both as constraints, so pip either keeps every
#     engine package exactly as it is or fails the build: it never swaps torch or vLLM.
# Ray is the lock's version (ray[default], for the dashboard and `ray health-check`).
set -euo pipefail

lock="${1:-requirements/cpu.lock.txt}"
if [[ ! -f "${lock}" ]]; then
    echo "install-deps: no lock file ${lock}" >&2
    exit 2
fi
ray_version="$(sed -nE 's/^[Rr][Aa][Yy]==([^[:space:];]+).*/\1/p' "${lock}")"
if [[ -z "${ray_version}" ]]; then
    echo "install-deps: ${lock} pins no ray==" >&2
    exit 2
fi

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

python3 -m pip list --format=freeze | grep -viE '^ray==' > "${work}/image.txt"
# Package names compare normalized (PEP 503: lower case, runs of -_. as one -).
awk -F'==' 'function n(s) { s = tolower(s); gsub(/[-_.]+/, "-", s); return s }
    NR == FNR { have[n($1)] = 1; next }
    /^[A-Za-z0-9]/ && !(n($1) in have)' \
    "${work}/image.txt" "${lock}" > "${work}/extra.txt"

python3 -m pip install --no-cache-dir -c "${work}/image.txt" -c "${work}/extra.txt" \
    "ray[default]==${ray_version}" pydantic PyYAML typer rich psutil pandas pyarrow
