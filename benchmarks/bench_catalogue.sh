#!/usr/bin/env bash
# coda bench of the whole catalogue on the lent H200, one width group per device call (each
# group fits the tool's 10-minute limit). Here (no GPU), first:
#   bash ../shared/device/pack.sh && coda build specs/*.yaml     # the default config
# then on the device, with carry [".device", "build"]:
#   bash benchmarks/bench_catalogue.sh 2048            # M = 16384, D = 2048
#   bash benchmarks/bench_catalogue.sh 4096 16384,4096 # M = 16384 and 4096, D = 4096
#   bash benchmarks/bench_catalogue.sh 8192
# Each writes bench.json, bench.csv and bench.log under $OUT/w<width>/ and packs them into
# $OUT/bench-w<width>.tar.gz. Charts are drawn afterwards, on any machine:
#   coda bench --plot benchmarks/results/<run>/bench.json
# ROUNDS (default 15) and SPECS (default specs/*.yaml) override the defaults; extra arguments
# after the M list go to coda bench as they are.
set -o pipefail
width=${1:?usage: bench_catalogue.sh WIDTH [M,...] [coda bench options]}
ms=${2:-16384}
shift $(( $# >= 2 ? 2 : 1 ))
source .device/setup.sh
out=${OUT:-/tmp/coda-bench}/w$width
mkdir -p "$out"
# shellcheck disable=SC2086
python3 -m coda_spec.cli bench --isolated ${SPECS:-specs/*.yaml} --width "$width" --m "$ms" \
  --rounds "${ROUNDS:-15}" --out "$out" "$@" 2>&1 | tee "$out/bench.log"
echo "coda bench exit ${PIPESTATUS[0]}" | tee -a "$out/bench.log"
tar -czf "${OUT:-/tmp/coda-bench}/bench-w$width.tar.gz" -C "$out" .
