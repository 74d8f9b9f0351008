#!/usr/bin/env bash
# Build the trimmed, pre-installed vLLM 0.26.0 bundle that we carry to a lent GPU node.
#
# Why: the lent node (one H200, Python 3.12 at /opt/torch/.venv, torch 2.11.0+cu130,
# transformers 5.17.0, numpy 2.5.2) has no package registry and accepts at most 64 MiB per call,
# *including* our repository tree (~21 MB). vLLM 0.26.0 is the newest release pinned to
# torch 2.11.0; its wheel plus the 32 small wheels of vllm026-deps.txt (the set offline
# LLM.generate actually imports) are installed here as `pip install --no-deps --target` would do
# there, trimmed of what decoder-only generation on SM90 never loads, compressed as one xz stream
# and split into parts small enough to ride along with the tree, one part per call.
#
# Output (git-ignored), under $OUTDIR (default <repo>/.vllm-bundle):
#   parts/vllm026-slim.tar.xz.partNN   the xz stream, split every $PART_SIZE (default 40m: the tree (~20 MiB) + one part stays under 64 MiB; three calls)
#   parts/vllm026-slim.sha256          sha256 of the whole stream (sha256sum -c format)
#   parts/vllm026-slim.parts.sha256    sha256 of each part (checked on arrival by stash_part.sh)
#   whl/                               the downloaded wheels (reused by later runs)
# On the node: scripts/gpu/stash_part.sh, then scripts/gpu/unpack_vllm_bundle.sh.
#
# Needs: python3 with pip and PyPI access, tar, xz, split, sha256sum, ~2 GB free disk.
# Takes ~4 min on 2 cores (xz -9 dominates).
#
# Knobs (environment): OUTDIR, PART_SIZE (split -b syntax), REQS (deps list), PYTHON,
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
EXTRA_REQS=${EXTRA_REQS:-}
PYTHON=${PYTHON:-python3}
VLLM_VERSION=0.26.0
NAME=vllm026-slim
LIMIT_MIB=64          # per-call transfer limit, tree included
MARGIN_MIB=4          # keep at least this much below the limit

# Wheels for the node's interpreter (CPython 3.12, glibc x86_64), whatever python runs this.
PLATFORM_ARGS=(--python-version 3.12 --implementation cp --only-binary=:all:)
for p in manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_26_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux_2_12_x86_64 manylinux2010_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
  PLATFORM_ARGS+=(--platform "$p")
done

mkdir -p "$OUTDIR/whl/deps" "$OUTDIR/whl/extra" "$OUTDIR/parts"
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/vllm-bundle.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
SITE=$STAGE/site

echo "== 1/5 download wheels into $OUTDIR/whl (already present ones are reused)"
"$PYTHON" -m pip download -q --no-deps "${PLATFORM_ARGS[@]}" -d "$OUTDIR/whl" "vllm==$VLLM_VERSION"
"$PYTHON" -m pip download -q --no-deps "${PLATFORM_ARGS[@]}" -d "$OUTDIR/whl/deps" -r "$REQS"
shopt -s nullglob
VLLM_WHL=("$OUTDIR"/whl/vllm-"$VLLM_VERSION"-*.whl)
DEP_WHL=("$OUTDIR"/whl/deps/*.whl)
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

echo "== 2/5 install (--no-deps --target) into a staging tree"
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile "${PLATFORM_ARGS[@]}" \
  --target "$SITE" "${VLLM_WHL[0]}" "${DEP_WHL[@]}" "${EXTRA_WHL[@]}"
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

# Each call carries one part + the two checksum files + the tree (tracked and untracked,
# not ignored, files: what the device tool copies).
tree_bytes=$(git -C "$ROOT" ls-files -co --exclude-standard -z \
  | (cd "$ROOT" && du -cb --files0-from=- 2>/dev/null) | tail -1 | cut -f1) || true
tree_bytes=${tree_bytes:-0}
max_part=$(stat -c %s "$OUTDIR/parts/$NAME".tar.xz.part* | sort -n | tail -1)
sums=$(stat -c %s "$OUTDIR/parts/$NAME.sha256" "$OUTDIR/parts/$NAME.parts.sha256" | awk '{t+=$1} END {print t}')
per_call=$((tree_bytes + max_part + sums))
echo
ls -l "$OUTDIR/parts"
echo "stream: $(stat -c %s "$STAGE/$NAME.tar.xz") bytes in $(find "$OUTDIR/parts" -name "$NAME.tar.xz.part*" | wc -l) parts"
awk -v t="$tree_bytes" -v p="$max_part" -v c="$per_call" -v l="$LIMIT_MIB" 'BEGIN {
  m = 1048576; printf "largest call: tree %.1f MiB + part %.1f MiB + sums = %.1f MiB (limit %d MiB)\n", t/m, p/m, c/m, l }'
if ((per_call > (LIMIT_MIB - MARGIN_MIB) * 1048576)); then
  echo "WARNING: less than $MARGIN_MIB MiB below the $LIMIT_MIB MiB per-call limit: lower PART_SIZE" >&2
fi
