#!/usr/bin/env bash
# The GPU gates of issue 7, as run on the lent H200 (2026-12-01): tests/gpu (runtime fuzz with
# M = 0, misuse, chains vs reference, verify pass/must-fail) and coda verify of four chains.
# Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/rmsnorm_chain.yaml specs/b1_dgrad_rmsnorm_bwd.yaml \
#     specs/f5_norm_lmhead_lse.yaml specs/llama_block.yaml tests/gpu/mutant_rmsnorm_chain.yaml
# then on the device, with carry [".device", "build"]:  bash benchmarks/device_gates.sh
set -o pipefail
source .device/setup.sh
out=${OUT:-/tmp/coda-gates}/logs
mkdir -p "$out"
timeout 360 python3 -m pytest tests/gpu -q -rA -p no:cacheprovider 2>&1 | tee "$out/gpu-tests.log"
timeout 200 python3 -m coda_spec.cli verify build/rmsnorm_chain-latest \
  build/b1_dgrad_rmsnorm_bwd-latest build/f5_norm_lmhead_lse-latest build/llama_block-latest \
  --seed 20261201 --junit "$out/verify.junit.xml" 2>&1 | tee "$out/verify.log"
echo "verify exit ${PIPESTATUS[0]}" | tee -a "$out/verify.log"
