#!/usr/bin/env bash
# b2's epilogue stages (issue 9 part 3): every candidate of a multi-variant b2 build tuned at
# D = 2048/4096/8192, each variant verified, the tuned chain benched against torch.compile and
# Liger, and Nsight Compute profiles of chosen variants at D = 4096. Here (no GPU), first:
#   coda build specs/b2_dgrad_dswiglu.yaml -o build/explore --config "$(cat benchmarks/b2_candidates.txt)"
# then on the device, with carry [".device", "build"]:  bash benchmarks/b2_epilogue.sh
# ROOT (default build/explore) is the build root; NCU_VARIANTS the ';'-separated configs to
# profile. Everything lands in $OUT/b2-epilogue.tar.gz.
set -o pipefail
[ -n "${CODA_SETUP_DONE:-}" ] || source .device/setup.sh
root=${ROOT:-build/explore}
out=${OUT:-/tmp/coda-b2e}
mkdir -p "$out/tune" "$out/bench" "$out/ncu"
b2=$(ls -d "$root"/b2_dgrad_dswiglu-[0-9a-f]* | head -1)
timeout ${TUNE_S:-240} python3 -m coda_spec.cli tune --isolated "$b2" --width 2048,4096,8192 --m 16384 \
  --rounds "${ROUNDS:-30}" --out "$out/tune/h200.json" > "$out/tune/tune.log" 2>&1
echo "tune exit $?" >> "$out/tune/tune.log"
tail -45 "$out/tune/tune.log"
timeout ${VERIFY_S:-200} python3 -m coda_spec.cli verify "$b2" --seed 20261201 \
  > "$out/verify.log" 2>&1
echo "verify exit $?" >> "$out/verify.log"
grep -cE "PASS" "$out/verify.log"; grep -E "FAIL|exit" "$out/verify.log" | tail -8
CODA_TUNED="$out/tune/h200.json" timeout ${BENCH_S:-150} python3 -m coda_spec.cli bench --isolated "$b2" \
  --width 2048,4096,8192 --baselines compile,liger --rounds 15 --out "$out/bench" \
  > "$out/bench/bench.log" 2>&1
echo "bench exit $?" >> "$out/bench/bench.log"
grep -E "b2_dgrad|exit" "$out/bench/bench.log" | head -20
if [ -n "${NCU_VARIANTS:-}" ]; then
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
  CODA_BUILD_ROOT=$root CODA_VARIANTS="$NCU_VARIANTS" timeout ${NCU_S:-200} "$NCU" --nvtx \
    --nvtx-include "coda/" --section SpeedOfLight --section WarpStateStats \
    --section SourceCounters --section LaunchStats --section Occupancy --import-source no \
    -f -o "$out/ncu/b2" python3 benchmarks/profile_reasons.py ncu b2_dgrad_dswiglu:4096 \
    > "$out/ncu/profile.log" 2>&1
  echo "ncu exit $?" >> "$out/ncu/profile.log"
  "$NCU" -i "$out/ncu/b2.ncu-rep" --page source --csv --print-source sass \
    > "$out/ncu/b2_sass.csv" 2> "$out/ncu/source.err"
  "$NCU" -i "$out/ncu/b2.ncu-rep" --page details --print-details all > "$out/ncu/details.txt" 2>&1
  gzip -f "$out/ncu/b2_sass.csv"
  rm -f "$out/ncu/b2.ncu-rep"
fi
tar -czf "$out/b2-epilogue.tar.gz" -C "$out" tune bench ncu verify.log
rm -rf "$out/tune" "$out/bench" "$out/ncu" "$out/verify.log"
