#!/usr/bin/env bash
# The measured reasons in docs/benchmarks.md (lent H200, carry [".device", "build"]):
#   bash benchmarks/profile_reasons.sh
# Nsight Compute on the kernels of the chains above 1.05x SoL, each next to its cuBLAS GEMM, and
# torch.profiler on the chains whose time is in host steps. Logs packed into $OUT/reasons.tar.gz.
set -o pipefail
source .device/setup.sh
out=${OUT:-/tmp/coda-reasons}/reasons
mkdir -p "$out"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
  --section LaunchStats --section WarpStateStats --section SchedulerStats"
# shellcheck disable=SC2086
timeout 300 "$NCU" --nvtx --nvtx-include "coda/" $sections \
  python3 benchmarks/profile_reasons.py ncu ${NCU_TARGETS:-b2_dgrad_dswiglu:4096 \
  b2_dgrad_dswiglu:8192 f1_residual_rmsnorm:2048 f7_qk_norm_rope:2048 f4_norm_rope:2048} \
  > "$out/ncu.txt" 2>&1
echo "ncu exit $?" >> "$out/ncu.txt"
timeout 200 python3 benchmarks/profile_reasons.py prof ${PROF_TARGETS:-b3_rope_bwd:4096 \
  b4_ce_fwd_bwd:4096 llama_block:4096} > "$out/prof.txt" 2>&1
echo "prof exit $?" >> "$out/prof.txt"
tar -czf "${OUT:-/tmp/coda-reasons}/reasons.tar.gz" -C "$out" .
grep -E "^(b2|f1|f7|f4)|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|ncu exit" "$out/ncu.txt" | head -120
grep -E "^== |prof exit" "$out/prof.txt"
