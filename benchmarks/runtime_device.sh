#!/usr/bin/env bash
# Issue 10 on the lent H200: the training-loop gates and the runtime's measurements.
# Here (no GPU), first:
#   bash ../shared/device/pack.sh && coda build specs/*.yaml tests/gpu/mutant_rmsnorm_chain.yaml
# then on the device, with carry [".device", "build"]:
#   bash benchmarks/runtime_device.sh gates    # tests/gpu (CUDA graph, determinism, profiler
#                                              # ranges, chains vs reference) + host overhead
#   bash benchmarks/runtime_device.sh verify   # coda verify of every build
#   bash benchmarks/runtime_device.sh bench W  # coda bench of b3, b4, llama_block at width W
# Logs go to $OUT/<part>/ and are packed into $OUT/<part>.tar.gz.
source benchmarks/device_status.sh  # pipefail; a failed part fails the script
part=${1:?usage: runtime_device.sh gates|verify|bench WIDTH}
source .device/setup.sh
out=${OUT:-/tmp/coda-runtime}/$part${2:+-w$2}
mkdir -p "$out"
case $part in
  gates)
    timeout ${GPU_TESTS_S:-330} python3 -m pytest tests/gpu -q -rA -p no:cacheprovider \
      2>&1 | tee "$out/gpu-tests.log"
    timeout 120 python3 benchmarks/host_overhead.py build/f2_deferred_norm-latest \
      build/rmsnorm_chain-latest build/b4_ce_fwd_bwd-latest build/llama_block-latest \
      --m 256 --calls 400 --out "$out/host_overhead.json" 2>&1 | tee "$out/host_overhead.log"
    ;;
  verify)
    # shellcheck disable=SC2046
    timeout ${VERIFY_S:-420} python3 -m coda_spec.cli verify $(ls -d build/*-latest) \
      --seed 20261201 --junit "$out/verify.junit.xml" 2>&1 | tee "$out/verify.log"
    echo "verify exit ${PIPESTATUS[0]}" | tee -a "$out/verify.log"
    ;;
  bench)
    timeout ${BENCH_S:-420} python3 -m coda_spec.cli bench --isolated specs/b3_rope_bwd.yaml \
      specs/b4_ce_fwd_bwd.yaml specs/llama_block.yaml --width "${2:?width}" --m 16384 \
      --rounds "${ROUNDS:-15}" --baselines eager,compile --out "$out" 2>&1 | tee "$out/bench.log"
    echo "coda bench exit ${PIPESTATUS[0]}" | tee -a "$out/bench.log"
    ;;
esac
tar -czf "${OUT:-/tmp/coda-runtime}/$part${2:+-w$2}.tar.gz" -C "$out" .
finish  # exit with the first failure's status (benchmarks/device_status.sh)
