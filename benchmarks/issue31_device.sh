#!/usr/bin/env bash
# Issue 31 on the lent H200: the three llama3 builds verified at their real shapes (the fp64
# references fitted to GPU memory), plus the GPU checks of the issue's lifted limits.
# Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/llama3_first.yaml specs/llama3_layer.yaml specs/llama3_last.yaml $ISSUE31_SPECS
# then on the device, with carry [".device", "build"]:
#   PHASE=llama3 bash benchmarks/issue31_device.sh   # coda verify of the three llama3 builds
#   PHASE=checks bash benchmarks/issue31_device.sh   # coda verify of ISSUE31_SPECS, GPU tests
#   PHASE=model bash benchmarks/issue31_device.sh    # the Llama with a padded attention_mask:
#       bf16 parity against transformers (fp32 reference), unpadded too; compile with the mask
# Logs go to /tmp/coda-issue31/i31/, packed after every part into $OUT/i31-$PHASE.tar.gz; the
# parts stop by BUDGET_S (default 570 s) after the start. The exit status is the first failing
# part's (a failed verify is not hidden behind a successful pack).
set -o pipefail
source .device/setup.sh
x=tests/specs_extra
ISSUE31_SPECS="${ISSUE31_SPECS:-$x/acc_pair_f32_store.yaml $x/gelu_mlp_bias_bwd.yaml tests/primitives/reduce_col.yaml}"
GPU_TESTS="${GPU_TESTS:-tests/gpu}"
out=/tmp/coda-issue31/i31
mkdir -p "$out"
end=$(( $(date +%s) + ${BUDGET_S:-570} ))
left() {  # left SECONDS: SECONDS, or what is left before the end (at least 1)
  local r=$(( end - $(date +%s) ))
  r=$(( r > $1 ? $1 : r )); echo $(( r < 1 ? 1 : r ))
}
status=0
keep() { local rc=$?; [ $status -eq 0 ] && status=$rc; return 0; }  # the first failure wins
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
date -u > "$out/date-$PHASE.txt"
pack() { tar -czf "${OUT:-/tmp/coda-issue31}/i31-$PHASE.tar.gz" -C "$out" .; }
case "$PHASE" in
llama3)
  for b in llama3_first llama3_layer llama3_last; do
    timeout "$(left 240)" python3 -u -m coda_spec.cli verify "build/$b-latest" --seed 20261203 \
      --junit "$out/verify-$b.junit.xml" 2>&1 | tee "$out/verify-$b.log"; keep; pack
  done
  ;;
checks)
  timeout "$(left 200)" python3 -m coda_spec.cli verify $ISSUE31_SPECS --seed 20261203 2>&1 \
    | tee "$out/verify-issue31.log"; keep; pack
  timeout "$(left 300)" python3 -m pytest -q -p no:cacheprovider -m gpu -rfE $GPU_TESTS 2>&1 \
    | tail -80 | tee "$out/gpu-tests.log"; keep
  ;;
model)
  for pad in 64 0; do
    timeout "$(left 200)" python3 benchmarks/llama_h200.py parity --layers "${LAYERS:-2}" \
      --pad $pad --out "$out/parity-pad$pad.json" 2>&1 | tee "$out/parity-pad$pad.log"; keep; pack
  done
  timeout "$(left 200)" python3 benchmarks/llama_h200.py compile --layers "${LAYERS:-2}" \
    --pad 64 --out "$out/compile-pad64.json" 2>&1 | tail -30 | tee "$out/compile-pad64.log"; keep
  ;;
*)
  echo "PHASE must be llama3, checks or model" >&2; status=2
  ;;
esac
pack
exit $status
