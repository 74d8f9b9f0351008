#!/usr/bin/env bash
# Build the trimmed, pre-installed vLLM 0.26.0 bundle that we carry to a lent GPU node.
#
# Why: the lent node (one H200, Python 3.12 at /opt/torch/.venv, torch 2.11.0+cu130,
# transformers 5.17.0, numpy 2.5.2) has no package registry and accepts at most 64 MiB per call,
# *including* our repository tree (~23 MB). vLLM 0.26.0 is the newest release pinned to
# torch 2.11.0; its wheel plus the 32 small wheels of vllm026-deps.txt (the set offline
# LLM.generate actually imports) plus the 7 of vllm026-serving-deps.txt (what `vllm serve` and
# `vllm bench serve` import on top: uvicorn, h11, watchfiles, prometheus-fastapi-instrumentator,
# model-hosting-container-standards, jmespath, python-multipart) are installed here as
# `pip install --no-deps --target` would do there, trimmed of what decoder-only generation on SM90
# never loads, compressed as one xz stream and split into parts small enough to ride along with
# the tree, one part per call.
#
# Why the serving wheels go into the same stream rather than a separate extra: they add 0.53 MB
# to the xz stream, which still splits into the same 3 parts, so the node calls stay 3 (no extra
# call, no unzip step, one checksum); a separate extra would need an unzip into a folder on
# PYTHONPATH (watchfiles is compiled: it cannot import from a zip) for no call saved.
#
# Output (git-ignored), under $OUTDIR (default <repo>/.vllm-bundle):
#   parts/vllm026-slim.tar.xz.partNN   the xz stream, split every $PART_SIZE (default 40m: the tree (~22 MiB) + one part stays under 64 MiB; 3 parts, 3 calls)
#   parts/vllm026-slim.sha256          sha256 of the whole stream (sha256sum -c format)
#   parts/vllm026-slim.parts.sha256    sha256 of each part (checked on arrival by stash_part.sh)
# SIZES_ONLY=1 bash scripts/gpu/build_vllm_bundle.sh prints the per-call sizes of the parts already built.
#   whl/                               the downloaded wheels (reused by later runs): whl/deps, whl/serving, whl/extra
#
# On the node, one call per part, each carrying that part and both checksum files
# (carry: .vllm-bundle/parts/vllm026-slim.tar.xz.partNN, .vllm-bundle/parts/vllm026-slim.sha256,
#  .vllm-bundle/parts/vllm026-slim.parts.sha256; the last call also .vllm-bundle/extra):
#   call 1: bash scripts/gpu/stash_part.sh 00
#   call 2: bash scripts/gpu/stash_part.sh 01
#   call 3: bash scripts/gpu/stash_part.sh 02 && bash scripts/gpu/node_campaign.sh   (or node_check.sh)
# (node_env.sh runs unpack_vllm_bundle.sh; with more parts, one more stash call per part.)
# The size printed at the end is per call, tree included.
#
# Needs: python3 with pip and PyPI access, tar, xz, split, sha256sum, ~2 GB free disk.
# Takes ~4 min on 2 cores (xz -9 dominates).
#
# Knobs (environment): OUTDIR, PART_SIZE (split -b syntax), REQS (deps list), SERVING_REQS
# (serving deps list; SERVING_REQS= builds the offline-only bundle), PYTHON,
# EXTRA_REQS (optional extra requirements file installed into the same tree; none by default —
# ray and bitsandbytes are far too big for this route).
#
# Consequence of the trim: FlashAttention-2-only paths (ALiBi models, forcing FA version 2) fail.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUTDIR=${OUTDIR:-$ROOT/.vllm-bundle}
PART_SIZE=${PART_SIZE:-40m}
REQS=${REQS:-$HERE/vllm026-deps.txt}
SERVING_REQS=${SERVING_REQS-$HERE/vllm026-serving-deps.txt}
EXTRA_REQS=${EXTRA_REQS:-}
PYTHON=${PYTHON:-python3}
VLLM_VERSION=0.26.0
NAME=vllm026-slim
LIMIT_MIB=64          # per-call transfer limit, tree included
MARGIN_MIB=1          # warn closer than this to the limit (the tree is measured as the device tool copies it)

# Wheels for the node's interpreter (CPython 3.12, glibc x86_64), whatever python runs this.
PLATFORM_ARGS=(--python-version 3.12 --implementation cp --only-binary=:all:)
for p in manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_26_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux_2_12_x86_64 manylinux2010_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
  PLATFORM_ARGS+=(--platform "$p")
done

# Per-call transfer sizes of the parts now in $OUTDIR/parts (SIZES_ONLY=1: print them and stop).
print_call_sizes() {
  local tree_bytes sums extra_bytes parts last p size total warn=0
  tree_bytes=$(git -C "$ROOT" ls-files -co --exclude-standard -z \
    | (cd "$ROOT" && du -cb --files0-from=- 2>/dev/null) | tail -1 | cut -f1) || true
  tree_bytes=${tree_bytes:-0}
  sums=$(stat -c %s "$OUTDIR/parts/$NAME.sha256" "$OUTDIR/parts/$NAME.parts.sha256" | awk '{t+=$1} END {print t}')
  extra_bytes=$(find "$ROOT/.vllm-bundle/extra" -type f -printf '%s\n' 2>/dev/null | awk '{t+=$1} END {print t+0}')
  parts=("$OUTDIR/parts/$NAME".tar.xz.part*)
  last=${parts[${#parts[@]}-1]}
  echo "per call (limit $LIMIT_MIB MiB, warning above $((LIMIT_MIB - MARGIN_MIB)) MiB): tree $tree_bytes B + checksums $sums B + part [+ .vllm-bundle/extra $extra_bytes B with the last]"
  for p in "${parts[@]}"; do
    size=$(stat -c %s "$p")
    total=$((tree_bytes + sums + size))
    [[ $p == "$last" ]] && total=$((total + extra_bytes))
    awk -v n="$(basename "$p")" -v s="$size" -v t="$total" -v x="$([[ $p == "$last" ]] && echo " + extra")" 'BEGIN {
      printf "  %s: part %.1f MiB -> call %.1f MiB (%.1f MB)%s\n", n, s/1048576, t/1048576, t/1e6, x }'
    ((total > (LIMIT_MIB - MARGIN_MIB) * 1048576)) && warn=1
  done
  if ((warn)); then
    echo "WARNING: a call is less than $MARGIN_MIB MiB below the $LIMIT_MIB MiB per-call limit: lower PART_SIZE (one more part, one more call) or shrink the tree" >&2
  fi
}
if [[ ${SIZES_ONLY:-0} == 1 ]]; then print_call_sizes; exit 0; fi

mkdir -p "$OUTDIR/whl/deps" "$OUTDIR/whl/serving" "$OUTDIR/whl/extra" "$OUTDIR/parts"
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/vllm-bundle.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
SITE=$STAGE/site

echo "== 1/5 download wheels into $OUTDIR/whl (already present ones are reused)"
"$PYTHON" -m pip download -q --no-deps "${PLATFORM_ARGS[@]}" -d "$OUTDIR/whl" "vllm==$VLLM_VERSION"
"$PYTHON" -m pip download -q --no-deps "${PLATFORM_ARGS[@]}" -d "$OUTDIR/whl/deps" -r "$REQS"
shopt -s nullglob
VLLM_WHL=("$OUTDIR"/whl/vllm-"$VLLM_VERSION"-*.whl)
DEP_WHL=("$OUTDIR"/whl/deps/*.whl)
SERVING_WHL=()
if [[ -n $SERVING_REQS ]]; then
  "$PYTHON" -m pip download -q --no-deps "${PLATFORM_ARGS[@]}" -d "$OUTDIR/whl/serving" -r "$SERVING_REQS"
  SERVING_WHL=("$OUTDIR"/whl/serving/*.whl)
fi
EXTRA_WHL=()
if [[ -n $EXTRA_REQS ]]; then
  "$PYTHON" -m pip download -q --no-deps "${PLATFORM_ARGS[@]}" -d "$OUTDIR/whl/extra" -r "$EXTRA_REQS"
  EXTRA_WHL=("$OUTDIR"/whl/extra/*.whl)
fi
shopt -u nullglob
[[ ${#VLLM_WHL[@]} -eq 1 ]] || { echo "expected one vllm $VLLM_VERSION wheel, got: ${VLLM_WHL[*]:-none}" >&2; exit 1; }
n_reqs=$(grep -cvE '^[[:space:]]*(#|$)' "$REQS")
if [[ ${#DEP_WHL[@]} -ne $n_reqs ]]; then
  # Stale wheels from an older deps list would silently ride along: refuse instead.
  echo "whl/deps holds ${#DEP_WHL[@]} wheels but $REQS lists $n_reqs: empty $OUTDIR/whl/deps and rerun" >&2
  exit 1
fi
if [[ -n $SERVING_REQS ]]; then
  n_serving=$(grep -cvE '^[[:space:]]*(#|$)' "$SERVING_REQS")
  if [[ ${#SERVING_WHL[@]} -ne $n_serving ]]; then
    echo "whl/serving holds ${#SERVING_WHL[@]} wheels but $SERVING_REQS lists $n_serving: empty $OUTDIR/whl/serving and rerun" >&2
    exit 1
  fi
fi

echo "== 2/5 install (--no-deps --target) into a staging tree"
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile "${PLATFORM_ARGS[@]}" \
  --target "$SITE" "${VLLM_WHL[0]}" "${DEP_WHL[@]}" "${SERVING_WHL[@]}" "${EXTRA_WHL[@]}"
rm -rf "${SITE:?}/bin"   # console scripts with this machine's interpreter path: useless there

echo "== 3/5 trim what decoder-only generation on an H200 (SM90, FA3) never loads"
# FlashAttention-2 (~291 MB), the Rust server front end, Blackwell-only FMHA kernels, deep_gemm
# builds for other Pythons, web UI assets of the server.
TRIM=(
  vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so
  vllm/vllm-rs
  vllm/third_party/deep_gemm/_C.cpython-310-x86_64-linux-gnu.so
  vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so
  vllm/third_party/deep_gemm/_C.cpython-313-x86_64-linux-gnu.so
  vllm/third_party/deep_gemm/_C.cpython-314-x86_64-linux-gnu.so
  vllm/third_party/fmha_sm100
  vllm/entrypoints/serve/instrumentator/static
)
trimmed=()
for rel in "${TRIM[@]}"; do
  if [[ -e $SITE/$rel ]]; then
    rm -rf "${SITE:?}/$rel"
    trimmed+=("$rel")
  else
    echo "   note: $rel not in the wheel (layout changed?), nothing trimmed there"
  fi
done
# The FA3 library must survive the trim: it is what the H200 runs.
[[ -e $SITE/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so ]] || { echo "FA3 library missing from the wheel" >&2; exit 1; }
core_lib=$(find "$SITE/vllm" -maxdepth 1 -name '_C*.abi3.so' | sort | head -1)
if command -v readelf >/dev/null && [[ -n $core_lib ]]; then
  cudart=$(readelf -d "$core_lib" | grep -o 'libcudart\.so\.[0-9]*' || true)
  echo "   ${core_lib#"$SITE/"} links ${cudart:-no libcudart} (the node has CUDA 13: expect libcudart.so.13)"
fi
{
  echo "vllm $VLLM_VERSION slim bundle for torch 2.11.0+cu130 / CPython 3.12 (scripts/gpu/build_vllm_bundle.sh)"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "vllm wheel: $(basename "${VLLM_WHL[0]}")"
  echo "trimmed: ${trimmed[*]}"
  echo "deps (${#DEP_WHL[@]}):"
  for w in "${DEP_WHL[@]}"; do echo "  $(basename "$w")"; done
  echo "serving (${#SERVING_WHL[@]}):"
  for w in "${SERVING_WHL[@]}"; do echo "  $(basename "$w")"; done
  echo "extra (${#EXTRA_WHL[@]}):"
  for w in "${EXTRA_WHL[@]}"; do echo "  $(basename "$w")"; done
} > "$SITE/VLLM_SLIM_MANIFEST.txt"
echo "   installed size: $(du -sh "$SITE" | cut -f1)"

echo "== 4/5 one xz stream"
tar -C "$SITE" --sort=name --owner=0 --group=0 --numeric-owner -cf - . \
  | xz -T0 -9 > "$STAGE/$NAME.tar.xz"

echo "== 5/5 split into parts of $PART_SIZE, with checksums"
rm -f "$OUTDIR/parts/$NAME".*
(cd "$STAGE" && sha256sum "$NAME.tar.xz") > "$OUTDIR/parts/$NAME.sha256"
split -b "$PART_SIZE" -d -a 2 "$STAGE/$NAME.tar.xz" "$OUTDIR/parts/$NAME.tar.xz.part"
(cd "$OUTDIR/parts" && sha256sum "$NAME".tar.xz.part*) > "$OUTDIR/parts/$NAME.parts.sha256"

# Each call carries one part + the two checksum files + the tree (tracked and untracked, not
# ignored, files: what the device tool copies); the last one also .vllm-bundle/extra (peft for
# the campaign's training step).
ls -l "$OUTDIR/parts"
echo "stream: $(stat -c %s "$STAGE/$NAME.tar.xz") bytes in $(find "$OUTDIR/parts" -name "$NAME.tar.xz.part*" | wc -l) parts"
print_call_sizes
