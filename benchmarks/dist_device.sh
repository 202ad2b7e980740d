#!/usr/bin/env bash
# Issue 24 on the lent GPUs: benchmarks/train_dist.py under torchrun. Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/llama3_first.yaml specs/llama3_layer.yaml specs/llama3_last.yaml
# then on the device, with carry [".device", "build"]:
#   NPROC=1 bash benchmarks/dist_device.sh    # one GPU: the baselines, the compile check
#   NPROC=2 bash benchmarks/dist_device.sh    # two GPUs (nvidia-h200-x2), with the 1-GPU dumps
# RUNS below lists the "wrap mode" pairs timed (one home: this file); each run's JSON row and
# log go to /tmp/coda-dist/, packed after every run into $OUT/dist-$NPROC.tar.gz; the runs stop
# by BUDGET_S (default 570 s) after the start. PARITY=1 also runs 5 AdamW steps on fixed data:
# with NPROC=1 it dumps the references (and compares 2 no-sync micro-batches against them);
# with NPROC=2 it compares against the NPROC=1 dumps in $REF (default: this run's folder).
source benchmarks/device_status.sh  # pipefail; a failed part fails the script
source .device/setup.sh
NPROC=${NPROC:-1}
RUNS=${RUNS:-"fsdp2 coda
ddp coda
fsdp2 coda-compile
fsdp2 hf-compile
ddp hf-compile"}
out=/tmp/coda-dist
REF=${REF:-$out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
date -u > "$out/date-$NPROC.txt"
pack() { tar -czf "${OUT:-/tmp/coda-dist}/dist-$NPROC.tar.gz" --exclude="*.pt" -C "$out" .; }  # not the dumps
run() {  # run NAME ARGS...: one torchrun, its row in NAME.json, its log in NAME.log
  local name=$1; shift
  timeout "$(left 200)" torchrun --nproc_per_node "$NPROC" benchmarks/train_dist.py "$@" \
    --out "$out/$name.json" > "$out/$name.log" 2>&1
  echo "$name: rc $? $(tr -d '\n ' < "$out/$name.json" 2>/dev/null | cut -c1-300)"
  pack
}
SMALL=${SMALL:-"--layers 2 --seq 1024"}  # parity: the 1B config's widths, 2 layers (the dumps hold
#   every parameter in fp32)
if [ -n "${PARITY:-}" ]; then
  for wrap in fsdp2 ddp; do
    if [ "$NPROC" = 1 ]; then
      run "parity-$wrap-1" --wrap $wrap --mode coda $SMALL --parity 5 --dump "$out/ref-$wrap.pt"
      run "parity-$wrap-1-micro2" --wrap $wrap --mode coda $SMALL --parity 5 --micro 2 \
        --compare "$out/ref-$wrap.pt"
    else
      run "parity-$wrap-$NPROC" --wrap $wrap --mode coda $SMALL --parity 5 \
        --compare "$REF/ref-$wrap.pt"
      run "parity-$wrap-$NPROC-micro2" --wrap $wrap --mode coda $SMALL --parity 5 --micro 2 \
        --compare "$REF/ref-$wrap.pt"
    fi
  done
fi
while read -r wrap mode <&3; do
  [ -n "$wrap" ] || continue
  run "$wrap-$mode-$NPROC" --wrap "$wrap" --mode "$mode" --steps "${STEPS:-8}" --warmup 2
done 3<<< "$RUNS"  # fd 3: a command in the loop cannot eat the lines
pack
finish  # exit with the first failure's status (benchmarks/device_status.sh)
