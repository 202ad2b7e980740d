#!/usr/bin/env bash
# Copy the latest build of each spec under a build root into a lean directory for the device:
# manifest.json, spec.yaml, the .so and the host steps' cubins (kernels/*.cubin), no objects
# (the device tool carries 64 MiB), with each spec's <name>-latest link (tests/gpu's need_build
# and `coda verify SPEC` look a build up by it).
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
  if compgen -G "$real/kernels/*.cubin" > /dev/null; then
    mkdir -p "$dst/$name/kernels"
    cp "$real"/kernels/*.cubin "$dst/$name/kernels/"
  fi
  ln -sfn "$name" "$dst/$(basename "$latest")"
done
du -sh "$dst"
