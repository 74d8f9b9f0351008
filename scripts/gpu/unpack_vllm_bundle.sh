#!/usr/bin/env bash
# ON THE GPU NODE. Reassemble the vLLM 0.26.0 bundle from the parts stashed by stash_part.sh,
# verify it, extract it once into $VLLM_SITE (default /tmp/site), run a quick preflight of the
# node's own packages (and of the serving deps), and print the environment to export.
# Run for you by node_env.sh (node_check.sh, node_campaign.sh) in the call that carries the last
# part: `bash scripts/gpu/stash_part.sh 02 && bash scripts/gpu/node_campaign.sh` (3 parts today;
# `ls .vllm-bundle/parts` says how many).
#
#   env_lines=$(scripts/gpu/unpack_vllm_bundle.sh [PARTS_DIR]) || exit 1   # default /tmp/vparts
#   eval "$env_lines"
#
# stdout carries only the `export ...` line; progress and preflight findings go to stderr.
# Idempotent: when $VLLM_SITE/VLLM_SLIM_MANIFEST.txt exists the parts are not needed again.
# The preflight reports, never fails (PREFLIGHT=0 skips it). Exit 1 when the parts are
# incomplete or do not match their sha256.
set -euo pipefail

PARTS_DIR=${1:-${VPARTS:-/tmp/vparts}}
SITE=${VLLM_SITE:-/tmp/site}
NAME=vllm026-slim
if [[ -n ${PYTHON:-} ]]; then :
elif [[ -x /opt/torch/.venv/bin/python3 ]]; then PYTHON=/opt/torch/.venv/bin/python3
else PYTHON=python3
fi

log() { echo "unpack: $*" >&2; }

if [[ -f $SITE/VLLM_SLIM_MANIFEST.txt ]]; then
  log "$SITE already holds the bundle ($(head -1 "$SITE/VLLM_SLIM_MANIFEST.txt")): not extracting again"
else
  [[ -f $PARTS_DIR/$NAME.sha256 ]] || { log "no $PARTS_DIR/$NAME.sha256 (carry it with a part)"; exit 1; }
  # Which parts make the stream: the list written at build time when present, else what is there.
  parts=()
  if [[ -f $PARTS_DIR/$NAME.parts.sha256 ]]; then
    missing=()
    while read -r _ part; do
      if [[ -f $PARTS_DIR/$part ]]; then parts+=("$PARTS_DIR/$part"); else missing+=("$part"); fi
    done < "$PARTS_DIR/$NAME.parts.sha256"
    if [[ ${#missing[@]} -gt 0 ]]; then log "missing parts in $PARTS_DIR: ${missing[*]}"; exit 1; fi
  else
    shopt -s nullglob
    parts=("$PARTS_DIR/$NAME".tar.xz.part*)   # split -d names sort in stream order
    shopt -u nullglob
    [[ ${#parts[@]} -gt 0 ]] || { log "no $NAME.tar.xz.part* in $PARTS_DIR"; exit 1; }
    log "no $NAME.parts.sha256: cannot tell whether all parts are here; the whole-stream sha256 decides"
  fi
  log "checking sha256 of ${#parts[@]} parts joined"
  want=$(awk '{print $1; exit}' "$PARTS_DIR/$NAME.sha256")
  got=$(cat "${parts[@]}" | sha256sum | awk '{print $1}')
  if [[ $want != "$got" ]]; then
    log "sha256 mismatch: want $want, got $got (a part damaged, missing, or from another build)"
    exit 1
  fi
  log "sha256 OK; extracting into $SITE"
  tmp=$(mktemp -d "$(dirname "$SITE")/.site.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  if command -v xz >/dev/null; then
    cat "${parts[@]}" | xz -dc | tar -C "$tmp" -xf -
  else
    log "no xz binary: extracting with Python's lzma"
    cat "${parts[@]}" | "$PYTHON" -c 'import sys, tarfile
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz") as t:
    t.extractall(sys.argv[1], filter="fully_trusted")' "$tmp"
  fi
  [[ -f $tmp/VLLM_SLIM_MANIFEST.txt ]] || { log "archive has no VLLM_SLIM_MANIFEST.txt"; exit 1; }
  rm -rf "$SITE"             # a half-extracted earlier attempt (no manifest) goes away
  mv "$tmp" "$SITE"
  trap - EXIT
  log "extracted: $(head -1 "$SITE/VLLM_SLIM_MANIFEST.txt") ($(du -sh "$SITE" | cut -f1))"
fi

if [[ ${PREFLIGHT:-1} != 0 ]]; then
  # Reads package metadata with the bundle first on the path, exactly as vLLM will see it.
  PYTHONPATH=$SITE "$PYTHON" - "$SITE" <<'PY' >&2 || log "preflight itself failed (ignored)"
import importlib.metadata as md
import importlib.util
import sys

site = sys.argv[1]


def ver(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def key(v):
    try:
        from packaging.version import Version
        return Version(v)
    except Exception:  # no packaging, or a version it cannot parse: compare the numbers
        nums = []
        for piece in v.split("+")[0].split("."):
            digits = "".join(ch for ch in piece if ch.isdigit()) or "0"
            nums.append(int(digits))
        return tuple(nums)


def say(status, what):
    print(f"preflight: {status:4} {what}")


print(f"preflight: python {sys.version.split()[0]} at {sys.executable}")
v = ver("vllm")
origin = md.distribution("vllm").locate_file("") if v else None
say("OK" if v == "0.26.0" and str(origin).startswith(site) else "WARN", f"vllm {v} from {origin}")
v = ver("torch")
say("OK" if v and v.startswith("2.11.0") else "WARN", f"torch {v} (vLLM 0.26.0 is built for 2.11.0)")
v = ver("transformers")
say("OK" if v and key(v) >= key("5.5.3") else "WARN", f"transformers {v} (vLLM 0.26 needs >=5.5.3)")
print(f"preflight: info triton {ver('triton')}, numpy {ver('numpy')}, flashinfer {ver('flashinfer-python')}")

# numba: pinned 0.65.0 by vLLM needs numpy<2.5 and is not brought; the node's own must import.
try:
    import numba
    import numpy
    say("OK", f"numba {numba.__version__} imports with numpy {numpy.__version__}")
except Exception as e:
    say("WARN", f"numba does not import ({type(e).__name__}: {e}); only n-gram speculation needs it")

v = ver("setuptools")
say("OK" if v is None or key(v) < key("81") else "WARN", f"setuptools {v} (vLLM 0.26 wants <81)")
v = ver("protobuf")
bad = v is not None and key("6.30") <= key(v) <= key("6.33.4")
say("WARN" if bad else "OK", f"protobuf {v} (vLLM 0.26 excludes 6.30 - 6.33.4)")
v = ver("opencv-python-headless")
say("OK" if v is None or key(v) >= key("4.13") else "WARN",
    f"opencv-python-headless {v} (vLLM 0.26 wants >=4.13, or absent)")

def locate(modules):
    """(found: "dist version (bundle|node)", missing: dist) for {module: distribution}."""
    found, missing = [], []
    for mod, dist in modules.items():
        spec = importlib.util.find_spec(mod)
        if spec is None:
            missing.append(dist)
        else:
            where = "bundle" if spec.origin and spec.origin.startswith(site) else "node"
            found.append(f"{dist} {ver(dist)} ({where})")
    return found, missing


# What the harness imports on the node besides torch/transformers/vllm.
harness = {"pydantic": "pydantic", "yaml": "PyYAML", "typer": "typer", "rich": "rich",
           "psutil": "psutil", "pandas": "pandas", "pyarrow": "pyarrow", "pynvml": "nvidia-ml-py",
           "ray": "ray", "bitsandbytes": "bitsandbytes", "accelerate": "accelerate",
           "safetensors": "safetensors", "tokenizers": "tokenizers"}
found, missing = locate(harness)
print("preflight: info harness deps present: " + ", ".join(found))
if missing:
    say("WARN", "harness deps missing on the node: " + ", ".join(missing))

# What `vllm serve` / `vllm bench serve` import beyond the offline path (the bundle carries the
# wheels of vllm026-serving-deps.txt; click, aiohttp, uvloop, prometheus_client come from the node).
# Only where each is found; node_campaign.sh's serving step runs the real import check
# (scripts/gpu/serving_imports.py).
serving = {"uvicorn": "uvicorn", "h11": "h11", "watchfiles": "watchfiles",
           "prometheus_fastapi_instrumentator": "prometheus-fastapi-instrumentator",
           "model_hosting_container_standards": "model-hosting-container-standards",
           "jmespath": "jmespath", "python_multipart": "python-multipart", "click": "click",
           "aiohttp": "aiohttp", "uvloop": "uvloop", "prometheus_client": "prometheus_client"}
found, missing = locate(serving)
print("preflight: info serving deps present: " + ", ".join(found))
if missing:
    say("WARN", "serving deps missing (vllm serve / bench serve will fail): " + ", ".join(missing))

# Bundle packages that hide a different version installed on the node.
shadow = []
node_path = [p for p in sys.path if not p.startswith(site)]
for d in md.distributions(path=[site]):
    name = d.metadata["Name"]
    for nd in md.distributions(name=name, path=node_path):
        if nd.version != d.version:
            shadow.append(f"{name} {d.version} over {nd.version}")
        break
if shadow:
    print("preflight: info bundle shadows node versions: " + ", ".join(sorted(shadow)))
PY
fi

echo "export PYTHONPATH=$SITE VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_ENABLE_V1_MULTIPROCESSING=0" \
     "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1"
