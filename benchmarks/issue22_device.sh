#!/usr/bin/env bash
# Issue 22 on the lent H200: the new language features verified and timed, the tutorial's chain.
# Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build examples/tutorial/relu2_mlp.yaml tests/primitives $ISSUE22_SPECS
# then on the device, with carry [".device", "build"], one phase per call:
#   PHASE=verify bash benchmarks/issue22_device.sh  # coda verify of the issue's specs, the
#       tutorial's chain and every primitive's conformance build; the GPU tests of those
#   PHASE=bench bash benchmarks/issue22_device.sh   # coda bench (vs torch eager and compile) of
#       the issue's specs and the tutorial's chain; the tutorial's training loop, 20 steps
# ISSUE22_SPECS below names the issue's specs (one home: this file). Logs go to
# /tmp/coda-issue22/i22/, packed after every part into $OUT/i22-$PHASE.tar.gz; the parts stop
# by BUDGET_S (default 570 s) after the start, so a call's limit keeps what ran.
set -o pipefail
source .device/setup.sh
ISSUE22_SPECS="tests/specs_extra/gqa_qknorm_rope.yaml tests/specs_extra/fp8_out_amax.yaml"
ISSUE22_SPECS="$ISSUE22_SPECS tests/specs_extra/dropout_residual.yaml ${EXTRA_SPECS:-}"
out=/tmp/coda-issue22/i22
mkdir -p "$out"
end=$(( $(date +%s) + ${BUDGET_S:-570} ))
left() {  # left SECONDS: SECONDS, or what is left before the end (at least 1)
  local r=$(( end - $(date +%s) ))
  r=$(( r > $1 ? $1 : r )); echo $(( r < 1 ? 1 : r ))
}
coda() { python3 -m coda_spec.cli "$@"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
date -u > "$out/date-$PHASE.txt"
pack() { tar -czf "${OUT:-/tmp/coda-issue22}/i22-$PHASE.tar.gz" -C "$out" .; }
case "$PHASE" in
verify)
  timeout "$(left 200)" coda verify examples/tutorial/relu2_mlp.yaml $ISSUE22_SPECS \
    --seed 20261202 2>&1 | tee "$out/verify-issue22.log"; pack
  timeout "$(left 120)" python3 -m pytest -q -p no:cacheprovider -m gpu \
    tests/gpu/test_primitive_conformance_gpu.py 2>&1 | tail -40 | tee "$out/gpu-conformance.log"
  pack
  for t in ${GPU_TESTS:-}; do
    timeout "$(left 120)" python3 -m pytest -q -p no:cacheprovider -m gpu "$t" 2>&1 | tail -30 \
      | tee -a "$out/gpu-tests.log"
  done; pack
  ;;
bench)
  timeout "$(left 330)" coda bench examples/tutorial/relu2_mlp.yaml $ISSUE22_SPECS --m 16384 \
    --baselines eager,compile --rounds 20 --out "$out/bench" 2>&1 | grep -v DEBUG \
    | tee "$out/bench.log"; pack
  timeout "$(left 120)" python3 examples/tutorial/train_relu2.py --build build/relu2_mlp-latest \
    --steps 20 2>&1 | tee "$out/train.log"; pack
  ;;
*) echo "PHASE must be verify or bench" >&2; exit 2 ;;
esac
pack
