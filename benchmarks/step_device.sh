#!/usr/bin/env bash
# Issue 32, items 1 and 4 on the lent H200, in one device call of about 560 s: the Llama step
# re-measured (benchmarks/train_step.py: ms, tokens/s, MFU, peak memory, SM clock, W, J/step and
# the profiler breakdown) and its GEMM kernels listed with the sustained ruler's prediction
# (benchmarks/step_gemms.py).
# Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/llama3_first.yaml specs/llama3_layer.yaml specs/llama3_last.yaml
#   the old tune table (before the re-tune) at $TUNED_OLD (default tuned_old.json in the
#   project root, untracked: the device copy takes it), e.g.
#   git show <commit before the re-tune>:coda_spec/tuned/h200.json > tuned_old.json
# then on the device, with carry [".device", "build"]:
#   bash benchmarks/step_device.sh
# Parts, in order of importance (each stops by BUDGET_S, default 560 s, after the start; a
# later part gets what is left, so a call's limit keeps what ran; PARTS picks some, in order):
#   step1b  train_step 1B 2x4096 fwdbwd: coda, coda@old, hf, hf-compile-nomask, liger, --profile
#           (about 180 s: 5 processes, compile's first step 50-80 s)
#   gemms   step_gemms 1B 2x4096: coda (+ the rulers' prediction: PREDICT, default all) and
#           hf-compile-nomask (GEMM_MODES)
#           (about 120 s: the sustained ruler over 28 kernels x ROUNDS streams, then isolated)
#   shapes  train_step 8B-like 4 layers 2x4096 and 1B 1x8192, the same modes (about 180 s each)
#   table   train_step at every shape of SHAPES (1b-2x4096,1b-1x8192,8b-layer4-2x4096) in one
#           invocation and one JSON, MODES at each, profiled; it leaves ADAMW_S (0) of the budget
#           to the parts after it (issue 33's step table: about 160 s a shape for seven modes
#           once the compiled modes' inductor cache is warm, device_run.sh compile-warm)
#   adamw   train_step 1B 2x4096 adamw: ADAMW_MODES (coda,hf-compile-nomask), ADAMW_S (90) s
#           (about 70 s)
#   memory  memory_peak 8B-like: what is live at coda's and Liger's peak (about 40 s; not in the
#           default PARTS)
# At 560 s the last parts are cut (their JSON keeps the modes that ran, the others are rows
# with error "budget"); run them in a second call with PARTS="shapes adamw".
# Knobs: STEPS (20), WARMUP (3), ROUNDS (sustained rounds, 2), TUNED (the new table; default:
# the search path, i.e. the shipped coda_spec/tuned/h200.json), TUNED_OLD (tuned_old.json),
# MODES (coda,coda@old,liger,hf,hf-compile-nomask: compile, whose first step is the longest,
# last, so a short budget cuts it rather than the others), SHAPE_MODES (the shapes part's modes;
# default MODES), STEP1B_S (the step1b part's seconds, 195), MODE_S (one mode's time-out, 150),
# PARTS.
# Logs and results (step-*.json/.log, gemms.json/.md/.log) go to /tmp/coda-step/step/, packed
# after every part into $OUT/step.tar.gz; the exit status is the first failing part's
# (benchmarks/device_status.sh).
BUDGET_S=${BUDGET_S:-560}
source benchmarks/device_status.sh  # pipefail; a failed part fails the script; left SECONDS
source .device/setup.sh
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-2}
TUNED_OLD=${TUNED_OLD:-tuned_old.json}
MODES=${MODES:-coda,coda@old,liger,hf,hf-compile-nomask}
results step  # $out, pack, date.txt and gpu.txt (benchmarks/device_status.sh)
tuned=()
[ -n "${TUNED:-}" ] && tuned=(--tuned "$TUNED")
if [ ! -f "$TUNED_OLD" ]; then
  echo "error: no old tune table at $TUNED_OLD (TUNED_OLD); coda@old is left out" | tee "$out/error.txt" >&2
  MODES=$(echo "$MODES" | tr , '\n' | grep -v '@old' | paste -sd, -)
  false
fi
pack
step() {  # step NAME SECONDS ARGS...: one train_step invocation, its table in NAME.log
  local name=$1 secs=$2
  shift 2
  local s
  s=$(left "$secs")
  timeout "$(( s + 15 ))" python3 benchmarks/train_step.py --budget-s "$s" --steps "$STEPS" \
    --warmup "$WARMUP" --timeout "${MODE_S:-150}" --tuned-old "$TUNED_OLD" "${tuned[@]}" \
    --out "$out/$name.json" "$@" 2>&1 | grep -v DEBUG | tee "$out/$name.log"
  pack
}
for part in ${PARTS:-step1b gemms shapes adamw}; do
  case "$part" in
  step1b) step step-1b-2x4096-fwdbwd "${STEP1B_S:-195}" --shape 1b-2x4096 --kind fwdbwd --modes "$MODES" --profile ;;
  gemms)
    s=$(left 150)
    timeout "$(( s + 15 ))" python3 benchmarks/step_gemms.py --shape 1b-2x4096 \
      --modes "${GEMM_MODES:-coda,hf-compile-nomask}" --steps "$STEPS" --warmup "$WARMUP" \
      --rounds "$ROUNDS" --predict "${PREDICT:-all}" --budget-s "$s" --timeout 150 "${tuned[@]}" --out "$out/gemms.json" \
      --markdown "$out/gemms.md" 2>&1 | grep -v DEBUG | tee "$out/gemms.log"
    pack
    ;;
  shapes)
    step step-8b-layer4-2x4096-fwdbwd 190 --shape 8b-layer4-2x4096 --kind fwdbwd --modes "${SHAPE_MODES:-$MODES}" --profile
    step step-1b-1x8192-fwdbwd 190 --shape 1b-1x8192 --kind fwdbwd --modes "${SHAPE_MODES:-$MODES}" --profile
    ;;
  table)
    step step-table-fwdbwd $(( $(left 560) - ${ADAMW_S:-0} )) --kind fwdbwd --modes "$MODES" \
      --shapes "${SHAPES:-1b-2x4096,1b-1x8192,8b-layer4-2x4096}" --profile
    ;;
  adamw) step step-1b-2x4096-adamw "${ADAMW_S:-90}" --shape 1b-2x4096 --kind adamw --modes "${ADAMW_MODES:-coda,hf-compile-nomask}" ;;
  memory)
    s=$(left 90)
    timeout "$s" python3 benchmarks/memory_peak.py --shape 8b-layer4-2x4096 --modes coda,liger \
      --out "$out/peak-8b.json" 2>&1 | grep -v DEBUG | tee "$out/peak-8b.log"
    pack
    ;;
  *) echo "unknown part $part (parts: step1b gemms shapes table adamw memory)" >&2; false ;;
  esac
done
pack
finish  # exit with the first failure's status (benchmarks/device_status.sh)
