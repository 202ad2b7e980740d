#!/usr/bin/env bash
# Copy the latest build of each spec under a build root into a lean directory for the device:
# manifest.json, spec.yaml and the .so only (no objects: the device tool carries 64 MiB).
#   bash benchmarks/stage_builds.sh build/tuned build/stage
# Each build keeps its content-addressed name <spec>-<hash> (tune files are keyed by it).
set -euo pipefail
src=${1:?usage: stage_builds.sh BUILD_ROOT STAGE_DIR}
dst=${2:?usage: stage_builds.sh BUILD_ROOT STAGE_DIR}
rm -rf "$dst"
mkdir -p "$dst"
for latest in "$src"/*-latest; do
  [ -f "$latest/manifest.json" ] || continue
  real=$(readlink -f "$latest")
  name=$(basename "$real")
  mkdir -p "$dst/$name"
  cp "$real/manifest.json" "$real/spec.yaml" "$dst/$name/"
  cp "$real"/*.so "$dst/$name/" 2>/dev/null || true   # host-only specs have no library
done
du -sh "$dst"
