#!/usr/bin/env bash
# Issue 32, item 2 on the lent H200: re-tune the llama3 model builds at the power cap. `coda tune`
# with the sustained ruler (its default: each sample a 0.5-s stream of back-to-back calls at the
# cap) over every candidate the specs list (eight: the untuned pick, pingpong 128x192 epi=16,
# cooperative 128x256 at clusters 1x1, 2x1 cstages=2, 1x2, 2x2, cooperative 256x128 at 1x1, 2x1),
# at the 1B dims and the 8B-like ones (hidden 4096, MLP 14336, 32/8 heads of 128), M = 8192 then
# M = 16384, all merged into one h200.json.
# Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/llama3_first.yaml specs/llama3_layer.yaml      # (BUILDS' specs)
#   coda build benchmarks/cublas_shapes/bare_gemm.yaml
# then on the device, with carry [".device", "build"]:
#   BUILDS="llama3_first llama3_layer" bash benchmarks/tune_cap_device.sh
# Parts, in order, each stopped by BUDGET_S (default 570 s) after the start:
#   0. with VERIFY=1, coda verify of each build (its real, ragged and small cases)
#   1. the 1B dims,      the first of MS (default "8192 16384"), ROUNDS (default 2) rounds
#   2. the 8B-like dims, the same M, ROUNDS rounds
#   3. cuBLAS's tile shapes (192x192, 320x128) against QuACK's: a bare GEMM at five of the 1B
#      step's shapes, every candidate and cuBLAS (BARE=0 skips)
#   4. the 1B and 8B-like dims at each later size of MS, 1 round
# Then, if the budget allows, `coda bench` of each build at M = 8192 under the new table
# (sustained, SoL only: every kernel against cuBLAS at its shape, streamed the same way).
# Knobs: BUILDS, MS, DIMS ("1b 8b"), VERIFY, BARE, ROUNDS, SUSTAIN_S (default 0.5), BENCH (default 1; 0 skips the bench part).
# The table (h200.json), the logs and the bench results go to /tmp/coda-tune/tune/, packed after
# every part into $OUT/tune.tar.gz; exit status: the first failing part's. Afterwards, here:
#   python benchmarks/untuned_pick.py tune/h200.json            # the untuned pick, re-learnt
#   and merge tune/h200.json into coda_spec/tuned/h200.json (docs/tuning.md, "The shipped table")
BUDGET_S=${BUDGET_S:-570}
source benchmarks/device_status.sh  # pipefail; a failed part fails the script; left SECONDS
source .device/setup.sh
ROUNDS=${ROUNDS:-2}
SUSTAIN_S=${SUSTAIN_S:-0.5}
results tune  # $out, pack, date.txt and gpu.txt (benchmarks/device_status.sh)
builds=()
for b in ${BUILDS:-llama3_first llama3_layer}; do builds+=("build/$b-latest"); done
B8=D=4096,F=14336,HD=128
tune() {  # tune NAME SECONDS M ROUNDS [--dims ...]
  local name=$1 secs=$2 m=$3 rounds=$4
  shift 4
  timeout "$(left "$secs")" python3 -u -m coda_spec.cli tune "${builds[@]}" --m "$m" \
    --rounds "$rounds" --sustain-s "$SUSTAIN_S" --out "$out/h200.json" "$@" 2>&1 \
    | tee "$out/$name.log"
  pack
}
# cuBLAS's tile shapes against QuACK's: bare_gemm (benchmarks/cublas_shapes/) at the 1B step's
# vocabulary and weight-gradient shapes, every candidate timed, and cuBLAS (SoL) at each shape
bare() {  # bare NAME M DIMS
  timeout "$(left 40)" python3 -u -m coda_spec.cli tune build/bare_gemm-latest --m "$2" \
    --dims "$3" --rounds "$ROUNDS" --sustain-s "$SUSTAIN_S" --out "$out/bare.json" 2>&1 \
    | tee "$out/bare-$1.log"
  timeout "$(left 30)" python3 -u -m coda_spec.cli bench build/bare_gemm-latest --m "$2" \
    --dims "$3" --baselines none --out "$out/bare-$1" 2>&1 | tee -a "$out/bare-$1.log"
  pack
}
if [ "${VERIFY:-0}" = 1 ]; then  # the builds against their reference first (real, ragged, small)
  for b in "${builds[@]}"; do
    short=$(basename "$b" -latest)
    timeout "$(left 120)" python3 -u -m coda_spec.cli verify "$b" --seed 20261203 2>&1 \
      | tee "$out/verify-$short.log"
    pack
  done
fi
first=1
for m in ${MS:-8192 16384}; do  # the first size at ROUNDS rounds, the later ones at 1
  r=1
  [ "$first" = 1 ] && r=$ROUNDS
  case " ${DIMS:-1b 8b} " in *" 1b "*) tune "tune-1b-$m" 200 "$m" "$r" ;; esac
  case " ${DIMS:-1b 8b} " in *" 8b "*) tune "tune-8b-$m" 200 "$m" "$r" --dims "$B8" ;; esac
  if [ "$first" = 1 ]; then
    if [ "${BARE:-1}" = 1 ]; then
      bare lm_logits 8192 N=128256,K=2048    # logits = h2 @ w_lm^T
      bare lm_dgrad 8192 N=2048,K=128256     # dv2 = dlogits @ w_lm
      bare lm_wgrad 128256 N=2048,K=8192     # dW_lm = dlogits^T v2
      bare wgrad_gu 16384 N=2048,K=8192      # dW_gu = dz1^T v1
      bare gate_up 8192 N=16384,K=2048       # z1 = h1 @ w_gu^T
    fi
  fi
  first=0
done
if [ "${BENCH:-1}" = 1 ]; then
  for b in "${builds[@]}"; do
    short=$(basename "$b" -latest)
    CODA_TUNED="$out/h200.json" timeout "$(left 90)" python3 -u -m coda_spec.cli bench "$b" \
      --m 8192 --baselines none --out "$out/bench-$short" 2>&1 | tee "$out/bench-$short.log"
    pack
  done
fi
finish  # exit with the first failure's status (benchmarks/device_status.sh)
