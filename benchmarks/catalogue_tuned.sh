#!/usr/bin/env bash
# The whole catalogue tuned and untuned at D = 2048/4096/8192, M = 16384 (issue 9's tables), on
# the lent H200, over a few device calls (each must fit the tool's 10-minute limit). Here:
#   coda build specs/*.yaml -o build/cands --config "$(cat benchmarks/catalogue_candidates.txt)"
#   bash benchmarks/stage_builds.sh build/cands build/stage
# then on the device, with carry [".device", "build/stage"]:
#   bash benchmarks/catalogue_tuned.sh tune              # coda tune of every build at the three
#                                                        # widths -> $OUT/tuned/h200.json
#   (copy it to tuned/h200.json in the repository: the runtime's default search path)
#   bash benchmarks/catalogue_tuned.sh bench tuned 2048  # coda bench, tuned, with baselines
#   bash benchmarks/catalogue_tuned.sh bench untuned 2048,4096,8192 none
#                                                        # every kernel at its fallback (the
#                                                        # default config), coda and SoL only
# Each step packs its files into $OUT/<step>.tar.gz. ROUNDS (bench, default 10) and TUNE_ROUNDS
# (default 30) override the defaults.
set -o pipefail
[ -n "${CODA_SETUP_DONE:-}" ] || source .device/setup.sh
out=${OUT:-/tmp/coda-cat}
root=${ROOT:-build/stage}
builds=("$root"/*-[0-9a-f]*)
case ${1:?usage: catalogue_tuned.sh tune | bench tuned|untuned WIDTHS [BASELINES]} in
tune)
  name=tune
  mkdir -p "$out/$name"
  timeout ${TUNE_S:-330} python3 -m coda_spec.cli tune --isolated "${builds[@]}" --width 2048,4096,8192 \
    --m 16384 --rounds "${TUNE_ROUNDS:-30}" --out "$out/$name/h200.json" \
    > "$out/$name/tune.log" 2>&1
  echo "tune exit $?" >> "$out/$name/tune.log"
  tail -4 "$out/$name/tune.log"
  cp "$out/$name/h200.json" "$out/h200.json" 2>/dev/null
  ;;
bench)
  mode=${2:?tuned or untuned}
  widths=${3:?widths, e.g. 2048,4096}
  name=bench-$mode-${widths//,/_}
  mkdir -p "$out/$name" "$out/empty-tune-dir"
  tuned=${TUNED_FILE:-tuned/h200.json}
  [ "$mode" = untuned ] && tuned=$out/empty-tune-dir
  CODA_TUNED=$tuned timeout ${BENCH_S:-540} python3 -m coda_spec.cli bench --isolated "${builds[@]}" \
    --width "$widths" --m 16384 --rounds "${ROUNDS:-10}" --no-kernels \
    --baselines "${4:-eager,compile,liger}" --out "$out/$name" > "$out/$name/bench.log" 2>&1
  echo "bench exit $?" >> "$out/$name/bench.log"
  grep -E "^[a-z0-9_]+ +M=|^[ !] +(fwd|bwd|fwd\+bwd) |exit" "$out/$name/bench.log" | tail -70
  ;;
esac
tar -czf "$out/$name.tar.gz" -C "$out" "$name"
rm -rf "${out:?}/$name" "$out/empty-tune-dir"
