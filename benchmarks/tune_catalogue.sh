#!/usr/bin/env bash
# Tune multi-variant builds on the lent H200, then check and time the result. Here (no GPU):
#   coda build specs/*.yaml -o build/tuned --config \
#     "128x256,cluster=2x1,cooperative;128x128,cluster=2x1,pingpong;128x192,cluster=2x1,pingpong;128x128,cluster=1x1,pingpong"
#   bash benchmarks/stage_builds.sh build/tuned build/stage
# then on the device, with carry [".device", "build/stage"]:
#   bash benchmarks/tune_catalogue.sh
# Writes $OUT/tuned/h200.json (coda tune of the chains in TUNE, default all: every kernel x
# variant at D = 2048/4096/8192, M = 16384), $OUT/verify.log (every variant of the chains in
# VERIFY checked) and
# $OUT/bench/bench.json (the chains in BENCH, tuned), packed into $OUT/tune.tar.gz.
set -o pipefail
source .device/setup.sh
out=${OUT:-/tmp/coda-tune}
mkdir -p "$out/tuned" "$out/bench"
builds=(build/stage/*-[0-9a-f]*)
if [ -n "${TUNE:-}" ]; then builds=(); for s in $TUNE; do builds+=(build/stage/$s-[0-9a-f]*); done; fi
timeout ${TUNE_S:-200} python3 -m coda_spec.cli tune --isolated "${builds[@]}" --width 2048,4096,8192 \
  --m 16384 --rounds "${ROUNDS:-8}" --out "$out/tuned/h200.json" > "$out/tune.log" 2>&1
echo "tune exit $?" >> "$out/tune.log"
tail -40 "$out/tune.log"
verify=()
for s in ${VERIFY:-b2_dgrad_dswiglu rmsnorm_chain f3_norm_swiglu}; do verify+=(build/stage/$s-[0-9a-f]*); done
timeout ${VERIFY_S:-150} python3 -m coda_spec.cli verify "${verify[@]}" --seed 20261201 \
  > "$out/verify.log" 2>&1
echo "verify exit $?" >> "$out/verify.log"
grep -E "FAIL|exit|variant|\[" "$out/verify.log" | tail -20
bench=()
for s in ${BENCH:-b2_dgrad_dswiglu rmsnorm_chain f3_norm_swiglu f1_residual_rmsnorm}; do bench+=(build/stage/$s-[0-9a-f]*); done
CODA_TUNED="$out/tuned/h200.json" timeout ${BENCH_S:-150} python3 -m coda_spec.cli bench --isolated \
  "${bench[@]}" --width 2048,4096,8192 --baselines compile,liger --rounds 10 --no-kernels \
  --out "$out/bench" > "$out/bench.log" 2>&1
echo "bench exit $?" >> "$out/bench.log"
tar -czf "$out/tune.tar.gz" -C "$out" tuned bench tune.log verify.log bench.log
