#!/usr/bin/env bash
# Issue 19 on the lent H200: built chains as torch ops. Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/*.yaml tests/gpu/mutant_rmsnorm_chain.yaml tests/specs_extra/softcap_logits.yaml
# then on the device, with carry [".device", "build"]:
#   bash benchmarks/issue19_device.sh
# 1. tests/gpu/test_ops_gpu.py: the op is the chain bitwise (rmsnorm_chain, b2, llama_block),
#    gradients through it are Chain.backward's bitwise (llama_block), fullgraph compile with no
#    graph break, a reduce-overhead run;
# 2. host time per call: chain.run checked/unchecked, the op eager and through the dispatcher,
#    torch.add (benchmarks/host_overhead.py);
# 3. the rest of tests/gpu, in the time left.
# Logs go to $OUT/ and are packed into $OUT/issue19.tar.gz.
source benchmarks/device_status.sh  # pipefail; a failed part fails the script
source .device/setup.sh
out=${OUT:-/tmp/coda-issue19}/issue19
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
timeout "${OPS_S:-200}" python3 -m pytest tests/gpu/test_ops_gpu.py -q -rA -p no:cacheprovider \
  2>&1 | tee "$out/ops-tests.log"
timeout 120 python3 benchmarks/host_overhead.py build/f2_deferred_norm-latest \
  build/rmsnorm_chain-latest build/b4_ce_fwd_bwd-latest build/llama_block-latest \
  --m 256 --calls 400 --out "$out/host_overhead.json" 2>&1 | tee "$out/host_overhead.log"
timeout "${GPU_TESTS_S:-200}" python3 -m pytest tests/gpu -q -p no:cacheprovider \
  --deselect tests/gpu/test_ops_gpu.py 2>&1 | tail -15 | tee "$out/gpu-tests.log"
tar -czf "${OUT:-/tmp/coda-issue19}/issue19.tar.gz" -C "$out" .
finish  # exit with the first failure's status (benchmarks/device_status.sh)
