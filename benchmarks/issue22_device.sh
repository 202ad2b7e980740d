#!/usr/bin/env bash
# Issue 22 on the lent H200: the new language features verified and timed, the tutorial's chain.
# Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build examples/tutorial/relu2_mlp.yaml tests/primitives $ISSUE22_SPECS
#   for s in "fp8_out_amax D N" "dropout_residual D F" "fp8_gemm K N"; do  # model-sized copies
#     set -- $s; sed -E "s/^dims: .*/dims: {M: dynamic, $2: 4096, $3: 4096}/" \
#       tests/specs_extra/$1.yaml > /tmp/$1.yaml
#   done; sed -E 's/^dims: .*/dims: {M: dynamic, Q: 2048, KV: 512, head_dim: 64}/' \
#     tests/specs_extra/rope_half_host.yaml > /tmp/rope_half_host.yaml
#   coda build /tmp/fp8_out_amax.yaml /tmp/dropout_residual.yaml /tmp/fp8_gemm.yaml \
#     /tmp/rope_half_host.yaml -o build-bench
# then on the device, with carry [".device", "build", "build-bench"], one phase per call:
#   PHASE=verify bash benchmarks/issue22_device.sh  # coda verify of the issue's specs, the
#       tutorial's chain and every primitive's conformance build; the GPU tests of those
#   PHASE=bench bash benchmarks/issue22_device.sh   # coda bench (vs torch eager and compile) of
#       the issue's specs and the tutorial's chain; the tutorial's training loop, 200 steps,
#       beside plain PyTorch
# ISSUE22_SPECS, GPU_TESTS and BENCH_SPECS below name what runs (one home: this file; EXTRA_*
# add to them). Logs go to
# /tmp/coda-issue22/i22/, packed after every part into $OUT/i22-$PHASE.tar.gz; the parts stop
# by BUDGET_S (default 570 s) after the start, so a call's limit keeps what ran.
source benchmarks/device_status.sh  # pipefail; a failed part fails the script
source .device/setup.sh
x=tests/specs_extra
ISSUE22_SPECS="$x/gqa_qknorm_rope.yaml $x/fp8_out_amax.yaml $x/dropout_residual.yaml"
ISSUE22_SPECS="$ISSUE22_SPECS $x/fp8_out_amax_host.yaml $x/masked_residual.yaml"
ISSUE22_SPECS="$ISSUE22_SPECS $x/philox_exact.yaml $x/scale_dims.yaml specs/f7_qk_norm_rope.yaml"
ISSUE22_SPECS="$ISSUE22_SPECS $x/fp8_gemm.yaml $x/layer_norm_var.yaml $x/rope_half_host.yaml"
ISSUE22_SPECS="$ISSUE22_SPECS ${EXTRA_SPECS:-}"
GPU_TESTS="tests/gpu/test_fp8_gpu.py tests/gpu/test_philox_gpu.py tests/gpu/test_head_ranges_gpu.py"
GPU_TESTS="$GPU_TESTS tests/gpu/test_fp8_gemm_gpu.py tests/gpu/test_finalize_stats_gpu.py"
GPU_TESTS="$GPU_TESTS ${EXTRA_GPU_TESTS:-}"
# bench: the test specs at model-sized dims (built into build-bench/, see the header)
BENCH_SPECS="$x/gqa_qknorm_rope.yaml build-bench/fp8_out_amax-latest"
BENCH_SPECS="$BENCH_SPECS build-bench/dropout_residual-latest build-bench/fp8_gemm-latest"
BENCH_SPECS="$BENCH_SPECS build-bench/rope_half_host-latest"
BENCH_SPECS="${BENCH_ONLY:-$BENCH_SPECS examples/tutorial/relu2_mlp.yaml} ${EXTRA_BENCH:-}"
out=/tmp/coda-issue22/i22
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
date -u > "$out/date-$PHASE.txt"
pack() { tar -czf "${OUT:-/tmp/coda-issue22}/i22-$PHASE.tar.gz" -C "$out" .; }
case "$PHASE" in
verify)
  timeout "$(left 150)" python3 -m coda_spec.cli verify examples/tutorial/relu2_mlp.yaml \
    $ISSUE22_SPECS --seed 20261202 2>&1 | tee "$out/verify-issue22.log"; pack
  timeout "$(left 150)" python3 -m pytest -q -p no:cacheprovider -m gpu -rfE $GPU_TESTS 2>&1 \
    | tail -80 | tee "$out/gpu-tests.log"; pack
  timeout "$(left 400)" python3 -m pytest -q -p no:cacheprovider -m gpu -rfE \
    tests/gpu/test_primitive_conformance_gpu.py 2>&1 | tail -60 | tee "$out/gpu-conformance.log"
  ;;
bench)
  if [ -n "${RETEST:-}" ]; then  # GPU tests to run again (a test fixed since the verify phase)
    timeout "$(left 90)" python3 -m pytest -q -p no:cacheprovider -m gpu -rfE $RETEST 2>&1 \
      | tail -40 | tee "$out/gpu-retest.log"; pack
  fi
  if [ -z "${NO_TRAIN:-}" ]; then
    timeout "$(left 120)" python3 examples/tutorial/train_relu2.py --build build/relu2_mlp-latest \
      --steps 200 --torch 2>&1 | tee "$out/train.log"; pack
  fi
  timeout "$(left 420)" python3 -m coda_spec.cli bench --isolated $BENCH_SPECS --m 16384 \
    --baselines eager,compile --rounds 20 --out "$out/bench" 2>&1 | grep -v DEBUG \
    | tee "$out/bench.log"; pack
  ;;
*) echo "PHASE must be verify or bench" >&2; exit 2 ;;
esac
pack
finish  # exit with the first failure's status (benchmarks/device_status.sh)
