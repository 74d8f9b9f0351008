#!/usr/bin/env bash
# Entrypoint of the harness images (cuda, rocm, cpu).
#
#   RAY_HEAD=1             start a Ray head node on this container (port RAY_PORT, default 6379)
#   RAY_ADDRESS=HOST:PORT  start a Ray worker node joined to that head
#   neither                run the given command as is
#
# With RAY_HEAD or RAY_ADDRESS and no command, the node runs in the foreground until stopped.
# With a command too (e.g. `harness run ...`), the node starts in the background and the command
# then runs in its place, with RAY_ADDRESS pointing at the cluster.
# The node advertises what `python -m harness.cli node start` detects here (harness/run/node.py).
# KubeRay workers run this too (containers/kuberay.yaml): KubeRay sets RAY_ADDRESS to the head.
set -euo pipefail

export TOKENIZERS_PARALLELISM="${TOKENIZERS_PARALLELISM:-false}"
export RAY_USAGE_STATS_ENABLED="${RAY_USAGE_STATS_ENABLED:-0}"

node=(python -m harness.cli node start)
if [[ "${RAY_HEAD:-0}" == "1" ]]; then
    if [[ -n "${RAY_ADDRESS:-}" ]]; then
        echo "entrypoint: set RAY_HEAD=1 or RAY_ADDRESS, not both" >&2
        exit 2
    fi
    node+=(--head)
    if [[ -n "${RAY_PORT:-}" ]]; then
        node+=(--port "${RAY_PORT}")
    fi
    cluster="127.0.0.1:${RAY_PORT:-6379}"
elif [[ -n "${RAY_ADDRESS:-}" ]]; then
    node+=(--address "${RAY_ADDRESS}")
    cluster="${RAY_ADDRESS}"
else
    if [[ $# -eq 0 ]]; then
        echo "entrypoint: nothing to do (set RAY_HEAD=1 or RAY_ADDRESS, or give a command)" >&2
        exit 2
    fi
    exec "$@"
fi

if [[ $# -eq 0 ]]; then
    exec "${node[@]}" --block
fi

"${node[@]}"
export RAY_ADDRESS="${cluster}"
exec "$@"
