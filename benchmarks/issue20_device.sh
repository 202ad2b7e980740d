#!/usr/bin/env bash
# Issue 20 on the lent H200: the Llama from specs. Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/*.yaml tests/gpu/mutant_rmsnorm_chain.yaml tests/specs_extra/*.yaml -j 2
# then on the device, with carry [".device", "build"]:
#   bash benchmarks/issue20_device.sh
# 1. coda verify of the three llama3 chains' kernels against the spec's reference;
# 2. tests/gpu: the ops (gradients through the op equal Chain.backward bitwise, fuse_grad_accum),
#    the onehot/valid lowering's chain (tests/specs_extra/lmhead_ce_bwd.yaml);
# 3. benchmarks/llama_h200.py parity: Llama-3.2-1B's config, coda's loss and gradient errors
#    against an fp32 transformers run, beside transformers-bf16's own;
# 4. benchmarks/llama_h200.py compile: graph breaks of the coda model (2 layers: the count does
#    not depend on depth), compiled loss;
# 5. benchmarks/train_step.py: one forward+loss+backward step at the 1B config, batch 2 x 4096,
#    transformers eager and compiled (mask patched) against coda eager and compiled.
# SKIP_CHECKS=1 leaves out 1 and 2 (a re-run of the model's parts).
# Logs go to $OUT/issue20/ and are packed into $OUT/issue20.tar.gz.
source benchmarks/device_status.sh  # pipefail; a failed part fails the script
source .device/setup.sh
out=${OUT:-/tmp/coda-issue20}/issue20
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
date -u > "$out/date.txt"
if [ -z "${SKIP_CHECKS:-}" ]; then
timeout "${VERIFY_S:-150}" python3 -m coda_spec.cli verify build/llama3_first-latest \
  build/llama3_layer-latest --seed 1 2>&1 | tee "$out/verify.log"
timeout "${VERIFY_S:-150}" python3 -m coda_spec.cli verify build/llama3_last-latest --seed 1 \
  --dims M=4096 2>&1 | tee -a "$out/verify.log"
timeout "${GPU_TESTS_S:-150}" python3 -m pytest tests/gpu/test_ops_gpu.py tests/gpu/test_verify_gpu.py \
  -q -rA -p no:cacheprovider 2>&1 | grep -v DEBUG | tail -40 | tee "$out/gpu-tests.log"
fi
timeout "${PARITY_S:-150}" python3 benchmarks/llama_h200.py parity --seq 2048 \
  --out "$out/parity.json" 2>&1 | grep -v DEBUG | tail -40 | tee "$out/parity.log"
timeout "${COMPILE_S:-150}" python3 benchmarks/llama_h200.py compile --layers 2 --seq 2048 \
  --out "$out/compile.json" 2>&1 | grep -v DEBUG | tail -30 | tee "$out/compile.log"
timeout "${STEP_S:-330}" python3 benchmarks/train_step.py --modes hf,hf-compile-nomask,coda,coda-compile \
  --shape 1b-2x4096 --kind fwdbwd --profile --timeout 150 --out "$out/step.json" 2>&1 \
  | grep -v DEBUG | tail -30 | tee "$out/step.log"
tar -czf "${OUT:-/tmp/coda-issue20}/issue20.tar.gz" -C "$out" .
finish  # exit with the first failure's status (benchmarks/device_status.sh)
