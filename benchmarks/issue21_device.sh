#!/usr/bin/env bash
# Issue 21 on the lent H200: the end-to-end training step, the shipped tune table, the example.
# Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/llama3_first.yaml specs/llama3_layer.yaml specs/llama3_last.yaml \
#     specs/llama3_layer_recompute.yaml specs/llama3_last_recompute.yaml      # their configs:
#   coda build benchmarks/fresh_chains -o build-fresh --config "$(cat benchmarks/fresh_candidates.txt)"
# then on the device, with carry [".device", "build", "build-fresh"], one phase per call:
#   PHASE=tune bash benchmarks/issue21_device.sh     # coda tune of the llama3 builds at the
#       benchmarked shapes -> h200.json in the archive, shipped as coda_spec/tuned/h200.json
#   PHASE=step1b bash benchmarks/issue21_device.sh   # the 1B step at 2 x 4096: eager modes
#       (fwdbwd, adamw), the example (500 steps, each twice), example_grads.py, torch.compile
#   PHASE=shapes bash benchmarks/issue21_device.sh   # the 1B eager modes again (their profile),
#       the example with an fp32 reference, hf-compile as a user gets it, 1 x 8192, the 8B-like
#       layers, the fresh chains' untuned-vs-tuned tune, coda-compile's time at 2 and 8 layers
#   PHASE=compile bash benchmarks/issue21_device.sh  # coda-compile at the 1B step
# The step phases use the shipped table (the package's coda_spec/tuned/, searched by default).
# Logs go to /tmp/coda-issue21/i21/, packed after every part into $OUT/i21-$PHASE.tar.gz; the
# parts stop by BUDGET_S (default 570 s) after the start, so a call's limit keeps what ran.
source benchmarks/device_status.sh  # pipefail; a failed part fails the script
source .device/setup.sh
out=/tmp/coda-issue21/i21  # only the packed archive goes to $OUT (a call returns 8 files)
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
date -u > "$out/date-$PHASE.txt"
llama="build/llama3_first-latest build/llama3_layer-latest build/llama3_last-latest"
llama="$llama build/llama3_layer_recompute-latest build/llama3_last_recompute-latest"
step() {  # step SHAPE KIND MODES TIMEOUT
  timeout "$(left $(( $4 * 4 + 30 )))" python3 benchmarks/train_step.py --modes "$3" --shape "$1" \
    --kind "$2" --profile --timeout "$4" --out "$out/step-$1-$2-${3//,/+}.json" 2>&1 \
    | grep -v DEBUG | tail -30 | tee "$out/step-$1-$2-${3//,/+}.log"
}
pack() { tar -czf "${OUT:-/tmp/coda-issue21}/i21-$PHASE.tar.gz" -C "$out" .; }
case "$PHASE" in
tune)
  timeout 150 python3 -m coda_spec.cli tune --isolated $llama --m 8192 --out "$out/h200.json" 2>&1 \
    | tee "$out/tune-1b.log"
  timeout 150 python3 -m coda_spec.cli tune --isolated $llama --m 8192 --dims D=4096,F=14336,HD=128 \
    --out "$out/h200.json" 2>&1 | tee "$out/tune-8b.log"
  ;;
step1b)
  step 1b-2x4096 fwdbwd coda,hf,liger,coda-recompute 60; pack
  step 1b-2x4096 adamw coda,hf,liger 60; pack
  timeout "$(left 150)" python3 examples/train_llama.py --builds build --steps 500 --repeat \
    --out "$out/example" 2>&1 | tr '\r' '\n' | grep -v DEBUG \
    | grep -E "^(corpus|coda|transf|median)|100%" | tee "$out/example.log"; pack
  timeout "$(left 90)" python3 benchmarks/example_grads.py --builds build --pretrain 100 \
    --out "$out/example-grads.json" 2>&1 | grep -v DEBUG | tee "$out/example-grads.log"; pack
  step 1b-2x4096 fwdbwd coda-compile,hf-compile-nomask 150
  ;;
shapes)
  step 1b-2x4096 fwdbwd coda,hf,liger 60; pack
  timeout "$(left 120)" python3 examples/train_llama.py --builds build --steps 500 --reference \
    --out "$out/example" 2>&1 | tr '\r' '\n' | grep -v DEBUG \
    | grep -E "^(corpus|coda|transf|median|fp32)|100%" | tee "$out/example.log"; pack
  step 1b-2x4096 fwdbwd hf-compile 120; pack
  step 1b-1x8192 fwdbwd coda,hf,liger 60; pack
  step 8b-layer4-2x4096 fwdbwd coda,hf,liger 60; pack
  timeout "$(left 90)" python3 -m coda_spec.cli tune --isolated build-fresh/fresh*-latest --m 8192,16384 \
    --out "$out/fresh-h200.json" 2>&1 | tee "$out/tune-fresh.log"; pack
  for n in 2 8; do  # why coda-compile's first step is slow: does it grow with depth?
    TORCH_LOGS=recompiles timeout "$(left 90)" python3 benchmarks/llama_h200.py compile \
      --layers $n --seq 4096 --out "$out/compile-$n.json" 2>&1 | grep -v DEBUG | tail -15 \
      | tee "$out/compile-$n.log"; pack
  done
  ;;
compile)
  step 1b-2x4096 fwdbwd coda-compile 280
  ;;
*)
  echo "PHASE must be tune, step1b, shapes or compile" >&2
  exit 2
  ;;
esac
pack
finish  # exit with the first failure's status (benchmarks/device_status.sh)
