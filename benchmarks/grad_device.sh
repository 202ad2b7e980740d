#!/usr/bin/env bash
# Issue 23 on the lent H200: the sections `coda grad` derives, verified, and timed against the
# hand-written ones. Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/llama_block.yaml examples/tutorial/relu2_mlp.yaml   # the hand-written
#   coda build specs/grad/*.yaml   # the derived (a separate run: a derived spec keeps its
#       forward's name; each spec file resolves to the build of its own content)
# then on the device, with carry [".device", "build"]:
#   bash benchmarks/grad_device.sh
# DERIVED lists the derived specs to verify; PAIRS the lines "hand-written derived..." to
# bench (one home: this file; EXTRA_DERIVED adds to it). Logs go to /tmp/coda-grad/, packed after
# every part into $OUT/grad.tar.gz; the parts stop by BUDGET_S (default 570 s) after the start.
source benchmarks/device_status.sh  # pipefail; a failed part fails the script
source .device/setup.sh
DERIVED="${DERIVED:-$(ls specs/grad/*.yaml)} ${EXTRA_DERIVED:-}"
PAIRS="${PAIRS:-specs/llama_block.yaml specs/grad/llama_block.yaml
examples/tutorial/relu2_mlp.yaml specs/grad/relu2_mlp_tutorial.yaml}"
out=/tmp/coda-grad
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
date -u > "$out/date.txt"
pack() { tar -czf "${OUT:-/tmp/coda-grad}/grad.tar.gz" -C "$out" .; }
if [ -z "${BENCH_ONLY:-}" ]; then
  timeout "$(left 240)" python3 -m coda_spec.cli verify $DERIVED --seed 20261202 2>&1 \
    | tee "$out/verify-derived.log"; pack
fi
while read -r line <&3; do  # each line: the hand-written target, then derived ones
  [ -n "$line" ] || continue
  name=$(basename "${line##* }" .yaml)
  timeout "$(left 240)" python3 -m coda_spec.cli bench --isolated $line --m 16384 \
    --baselines "${BASELINES:-none}" --out "$out/bench-$name" 2>&1 | tee "$out/bench-$name.log"
  pack
done 3<<< "$PAIRS"  # fd 3: a command in the loop cannot eat the lines
pack
finish  # exit with the first failure's status (benchmarks/device_status.sh)
