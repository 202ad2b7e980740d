#!/usr/bin/env bash
# Issue 11 on the lent H200: nothing regresses after the back-half refactor (manifest format 6,
# the lowering API, the new generated kernels) and the new `softcap` primitive verifies.
# Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/*.yaml tests/gpu/mutant_rmsnorm_chain.yaml tests/specs_extra/softcap_logits.yaml \
#     tests/specs_extra/host_elementwise.yaml tests/specs_extra/host_gather.yaml \
#     tests/specs_extra/host_pairs.yaml
# then on the device, with carry [".device", "build"]:
#   bash benchmarks/issue11_device.sh verify   # coda verify of every build (real, ragged, small)
#   bash benchmarks/issue11_device.sh gates    # tests/gpu (chains, fuzz, misuse, training gates)
#   (coda bench: benchmarks/runtime_device.sh bench W)
# Logs go to $OUT/<part>/ and are packed into $OUT/<part>.tar.gz.
source benchmarks/device_status.sh  # pipefail; a failed part fails the script
part=${1:?usage: issue11_device.sh verify|gates}
source .device/setup.sh
out=${OUT:-/tmp/coda-issue11}/$part${2:+-w$2}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
case $part in
  verify)
    # one coda verify process per chain, 90 s each, unbuffered, with a stack dump on time-out
    # shellcheck disable=SC2046
    OUT=$out bash benchmarks/verify_each.sh "${VERIFY_EACH_S:-90}" $(ls -d build/*-latest)
    ;;
  gates)
    timeout ${GPU_TESTS_S:-540} python3 -m pytest tests/gpu -q -rA -p no:cacheprovider \
      2>&1 | tee "$out/gpu-tests.log"
    ;;
esac
tar -czf "${OUT:-/tmp/coda-issue11}/$part${2:+-w$2}.tar.gz" -C "$out" .
finish  # exit with the first failure's status (benchmarks/device_status.sh)
