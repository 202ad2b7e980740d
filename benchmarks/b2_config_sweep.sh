#!/usr/bin/env bash
# b2 (dgrad + packed dSwiGLU + zdz) under eight tile configs, and where its epilogue's time goes
# (issue 9's starting data). Here (no GPU), first:
#   for c in 128x256,cluster=2x1,cooperative 128x256,cluster=1x1,cooperative \
#            256x128,cluster=2x1,cooperative 128x128,cluster=2x1,cooperative \
#            128x192,cluster=1x1,pingpong 128x128,cluster=1x1,pingpong \
#            128x128,cluster=2x1,pingpong 128x192,cluster=2x1,pingpong; do
#     coda build specs/b2_dgrad_dswiglu.yaml -o build/sweep --config $c; done
# then on the device, with carry [".device", "build"]:  bash benchmarks/b2_config_sweep.sh
# Writes $OUT/sweep/bench.{json,csv,log} (every config x D = 2048/4096/8192 against
# torch.compile and Liger) and an Nsight Compute source-level profile of the default-config
# kernel at D = 4096 (per-SASS-instruction stall samples: b2_sass.csv, gzipped here), packed into
# $OUT/b2-sweep.tar.gz.
set -o pipefail
source .device/setup.sh
out=${OUT:-/tmp/coda-b2}
mkdir -p "$out/sweep" "$out/ncu"
timeout 330 python3 -m coda_spec.cli bench --isolated build/sweep/b2_dgrad_dswiglu-[0-9a-f]* \
  --width 2048,4096,8192 --baselines compile,liger --rounds "${ROUNDS:-10}" \
  --out "$out/sweep" > "$out/sweep/bench.log" 2>&1
echo "bench exit $?" >> "$out/sweep/bench.log"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
timeout 150 "$NCU" --nvtx --nvtx-include "coda/" --section SpeedOfLight \
  --section WarpStateStats --section SourceCounters --import-source no -f -o "$out/ncu/b2" \
  python3 benchmarks/profile_reasons.py ncu b2_dgrad_dswiglu:4096 > "$out/ncu/profile.log" 2>&1
echo "ncu exit $?" >> "$out/ncu/profile.log"
"$NCU" -i "$out/ncu/b2.ncu-rep" --page source --csv --print-source sass \
  > "$out/ncu/b2_sass.csv" 2> "$out/ncu/source.err"
"$NCU" -i "$out/ncu/b2.ncu-rep" --page details --print-details all > "$out/ncu/details.txt" 2>&1
rm -f "$out/ncu/b2.ncu-rep"
tar -czf "$out/b2-sweep.tar.gz" -C "$out" sweep ncu
rm -rf "$out/sweep" "$out/ncu"
