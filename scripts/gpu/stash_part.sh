#!/usr/bin/env bash
# ON THE GPU NODE. Move carried vLLM bundle parts out of the repo copy into $VPARTS
# (default /tmp/vparts), which the node keeps between back-to-back calls while it stays warm.
#
#   scripts/gpu/stash_part.sh .vllm-bundle/parts/vllm026-slim.tar.xz.part00
#   scripts/gpu/stash_part.sh 00            # same: a bare suffix is looked up in .vllm-bundle/parts
#
# The checksum files (vllm026-slim.sha256, vllm026-slim.parts.sha256), when carried alongside,
# are copied too, and each part is checked against vllm026-slim.parts.sha256 on arrival, so a
# damaged transfer costs one call, not the whole sequence. Exit 1 on a bad or missing part.
# Then, with the last part: scripts/gpu/unpack_vllm_bundle.sh (node_check.sh / node_campaign.sh
# run it through node_env.sh).
#
# The device calls, one part each (3 parts today: 00 01 02; after a rebuild `ls .vllm-bundle/parts`),
# each carrying the part and both checksum files:
#   carry: .vllm-bundle/parts/vllm026-slim.tar.xz.partNN .vllm-bundle/parts/vllm026-slim.sha256
#          .vllm-bundle/parts/vllm026-slim.parts.sha256   (+ .vllm-bundle/extra with the last part)
#   bash scripts/gpu/stash_part.sh 00
#   bash scripts/gpu/stash_part.sh 01
#   bash scripts/gpu/stash_part.sh 02 && bash scripts/gpu/node_campaign.sh   (or node_check.sh)
# Back to back: the node keeps /tmp/vparts only while it stays warm.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PARTS_SRC=$ROOT/.vllm-bundle/parts
DEST=${VPARTS:-/tmp/vparts}
NAME=vllm026-slim

if [[ $# -eq 0 ]]; then
  echo "usage: $0 PART [PART...]   (a path, a file name, or the NN suffix of $NAME.tar.xz.partNN)" >&2
  exit 2
fi
mkdir -p "$DEST"

# Checksum files travel with every part (they are tiny): take the newest copy offered.
for f in "$NAME.sha256" "$NAME.parts.sha256"; do
  if [[ -f $PARTS_SRC/$f ]]; then
    cp -f "$PARTS_SRC/$f" "$DEST/$f"
  fi
done

rc=0
for arg in "$@"; do
  src=
  for cand in "$arg" "$ROOT/$arg" "$PARTS_SRC/$arg" "$PARTS_SRC/$NAME.tar.xz.part$arg"; do
    if [[ -f $cand ]]; then src=$cand; break; fi
  done
  if [[ -z $src ]]; then
    echo "stash: $arg not found (was it carried? looked in ., $ROOT and $PARTS_SRC)" >&2
    rc=1; continue
  fi
  # The checksum files may have been carried in the same folder as an explicitly given path.
  for f in "$NAME.sha256" "$NAME.parts.sha256"; do
    if [[ -f $(dirname "$src")/$f && ! $(dirname "$src")/$f -ef $DEST/$f ]]; then
      cp -f "$(dirname "$src")/$f" "$DEST/$f"
    fi
  done
  base=$(basename "$src")
  cp -f "$src" "$DEST/$base.tmp" && mv -f "$DEST/$base.tmp" "$DEST/$base"
  if [[ -f $DEST/$NAME.parts.sha256 ]]; then
    if grep -F "  $base" "$DEST/$NAME.parts.sha256" | (cd "$DEST" && sha256sum -c --status -); then
      echo "stash: $base OK ($(stat -c %s "$DEST/$base") bytes, checksum matches) -> $DEST"
    else
      echo "stash: $base does NOT match $NAME.parts.sha256 (damaged, or from another build): removed" >&2
      rm -f "$DEST/$base"; rc=1
    fi
  else
    echo "stash: $base copied to $DEST ($(stat -c %s "$DEST/$base") bytes; no $NAME.parts.sha256 to check against)"
  fi
done

# What is still to come.
if [[ -f $DEST/$NAME.parts.sha256 ]]; then
  missing=()
  while read -r _ part; do
    [[ -f $DEST/$part ]] || missing+=("$part")
  done < "$DEST/$NAME.parts.sha256"
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "stash: all parts present in $DEST: run scripts/gpu/unpack_vllm_bundle.sh $DEST"
  else
    echo "stash: still missing: ${missing[*]}"
  fi
fi
exit "$rc"
