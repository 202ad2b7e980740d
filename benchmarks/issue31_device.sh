#!/usr/bin/env bash
# Issue 31 on the lent H200: the three llama3 builds verified at their real shapes (the fp64
# references fitted to GPU memory), plus the GPU checks of the issue's lifted limits.
# Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/llama3_first.yaml specs/llama3_layer.yaml specs/llama3_last.yaml
#   coda grad tests/grad_specs/gelu_mlp_bias.yaml -o /tmp/gelu_mlp_bias_grad.yaml
#   coda build tests/specs_extra/swiglu_fp32_aux.yaml tests/primitives/reduce_col.yaml \
#     /tmp/gelu_mlp_bias_grad.yaml
# then on the device, with carry [".device", "build"]:
#   PHASE=llama3 bash benchmarks/issue31_device.sh   # coda verify of the three llama3 builds
#   PHASE=checks bash benchmarks/issue31_device.sh   # coda verify of ISSUE31_SPECS, GPU tests
#   PHASE=model bash benchmarks/issue31_device.sh    # the Llama with a padded attention_mask:
#       bf16 parity against transformers (fp32 reference), unpadded too; compile with the mask
# Logs go to /tmp/coda-issue31/i31/, packed after every part into $OUT/i31-$PHASE.tar.gz; the
# parts stop by BUDGET_S (default 570 s) after the start; the exit status is the first failing
# part's (benchmarks/device_status.sh).
source benchmarks/device_status.sh  # pipefail; a failed part fails the script; left SECONDS
source .device/setup.sh
# the lifted limits: fp32 stores in an acc_pair kernel, reduce_col in a host step (its
# conformance build and the derived biased GELU MLP backward)
ISSUE31_SPECS="build/swiglu_fp32_aux-latest build/prim_reduce_col-latest build/gelu_mlp-latest"
out=/tmp/coda-issue31/i31
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
date -u > "$out/date-$PHASE.txt"
pack() { tar -czf "${OUT:-/tmp/coda-issue31}/i31-$PHASE.tar.gz" -C "$out" .; }
case "$PHASE" in
llama3)
  for b in llama3_first llama3_layer llama3_last; do
    timeout "$(left 240)" python3 -u -m coda_spec.cli verify "build/$b-latest" --seed 20261203 \
      --junit "$out/verify-$b.junit.xml" 2>&1 | tee "$out/verify-$b.log"; pack
  done
  ;;
checks)
  timeout "$(left 200)" python3 -m coda_spec.cli verify $ISSUE31_SPECS --seed 20261203 2>&1 \
    | tee "$out/verify-issue31.log"; pack
  timeout "$(left 150)" python3 -m pytest -q -p no:cacheprovider -m gpu -rfE \
    tests/gpu/test_pair_f32_gpu.py 2>&1 | tail -40 | tee "$out/gpu-pair-f32.log"; pack
  timeout "$(left 150)" python3 -m pytest -q -p no:cacheprovider -m gpu -rfE \
    tests/gpu/test_primitive_conformance_gpu.py -k reduce_col 2>&1 | tail -40 \
    | tee "$out/gpu-conformance-reduce-col.log"
  ;;
model)
  for pad in 64 0; do
    timeout "$(left 200)" python3 benchmarks/llama_h200.py parity --layers "${LAYERS:-2}" \
      --pad $pad --out "$out/parity-pad$pad.json" 2>&1 | tee "$out/parity-pad$pad.log"; pack
  done
  timeout "$(left 200)" python3 benchmarks/llama_h200.py compile --layers "${LAYERS:-2}" \
    --pad 64 --out "$out/compile-pad64.json" 2>&1 | tail -30 | tee "$out/compile-pad64.log"
  ;;
*)
  echo "PHASE must be llama3, checks or model" >&2; false
  ;;
esac
pack
finish  # exit with the first failure's status (benchmarks/device_status.sh)
