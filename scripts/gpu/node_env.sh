# Sourced (not run) by node_check.sh and node_campaign.sh ON THE GPU NODE, with OUT set:
# picks the node's Python, unpacks the stashed vLLM bundle (unpack_vllm_bundle.sh; its preflight
# goes to $OUT/node.txt) and exports what it prints. Sets HERE, ROOT and PYTHON; exits 1 when the
# bundle does not unpack.
mkdir -p "$OUT"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [[ -x /opt/torch/.venv/bin/python3 ]]; then PYTHON=/opt/torch/.venv/bin/python3; else PYTHON=python3; fi
if ! env_lines=$(PYTHON=$PYTHON bash "$HERE/unpack_vllm_bundle.sh" 2>"$OUT/node.txt"); then
  echo "$(basename "$0"): the vLLM bundle did not unpack; see $OUT/node.txt" >&2
  cat "$OUT/node.txt" >&2
  exit 1
fi
eval "$env_lines"
