#!/usr/bin/env bash
# The whole catalogue tuned and untuned at D = 2048/4096/8192, M = 16384 (issue 9's tables), on
# the lent H200, in two device calls (each fits the tool's 10-minute limit). Here (no GPU):
#   coda build specs/*.yaml -o build/cands --config "$(cat benchmarks/catalogue_candidates.txt)"
#   bash benchmarks/stage_builds.sh build/cands build/stage
# then on the device, with carry [".device", "build/stage"]:
#   bash benchmarks/catalogue_tuned.sh tuned     # coda tune of every build, then coda bench
#                                                # with the tune file: $OUT/tuned.tar.gz
#   bash benchmarks/catalogue_tuned.sh untuned   # coda bench of the same builds with no tune
#                                                # file (every kernel at its fallback, the
#                                                # default config), then coda verify of VERIFY
# Compare here: coda bench untuned/bench.json --compare ... or read both tables.
# ROUNDS (bench, default 10), TUNE_ROUNDS (default 30) and VERIFY override the defaults.
set -o pipefail
mode=${1:?usage: catalogue_tuned.sh tuned|untuned}
[ -n "${CODA_SETUP_DONE:-}" ] || source .device/setup.sh
out=${OUT:-/tmp/coda-cat}
root=${ROOT:-build/stage}
mkdir -p "$out/$mode"
builds=("$root"/*-[0-9a-f]*)
bench() {
  timeout ${BENCH_S:-400} python3 -m coda_spec.cli bench "${builds[@]}" --width 2048,4096,8192 \
    --m 16384 --rounds "${ROUNDS:-10}" --no-kernels --out "$out/$mode/bench" \
    > "$out/$mode/bench.log" 2>&1
  echo "bench exit $?" >> "$out/$mode/bench.log"
  grep -E "^[a-z0-9_]+ +M=|^[ !] +(fwd|bwd|fwd\+bwd)|exit" "$out/$mode/bench.log" | tail -80
}
if [ "$mode" = tuned ]; then
  timeout ${TUNE_S:-200} python3 -m coda_spec.cli tune "${builds[@]}" --width 2048,4096,8192 \
    --m 16384 --rounds "${TUNE_ROUNDS:-30}" --out "$out/tuned/h200.json" \
    > "$out/tuned/tune.log" 2>&1
  echo "tune exit $?" >> "$out/tuned/tune.log"
  grep -E "exit|winner|fallback kept|won by" "$out/tuned/tune.log" | tail -5
  CODA_TUNED="$out/tuned/h200.json" bench
else
  mkdir -p "$out/empty-tune-dir"
  CODA_TUNED="$out/empty-tune-dir" bench
  if [ -n "${VERIFY:-}" ]; then
    v=(); for s in $VERIFY; do v+=("$root"/$s-[0-9a-f]*); done
    timeout ${VERIFY_S:-150} python3 -m coda_spec.cli verify "${v[@]}" --seed 20261201 \
      > "$out/untuned/verify.log" 2>&1
    echo "verify exit $?" >> "$out/untuned/verify.log"
    grep -E "=> |exit" "$out/untuned/verify.log" | tail -12
  fi
fi
tar -czf "$out/$mode.tar.gz" -C "$out" "$mode"
rm -rf "${out:?}/$mode"
