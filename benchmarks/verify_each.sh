#!/usr/bin/env bash
# coda verify of each build in its own process, with a per-chain time limit and a Python stack
# dump (faulthandler on SIGABRT) when one runs over; stops after two chains in a row time out.
#   bash benchmarks/verify_each.sh SECONDS BUILD...      (on the device, after .device/setup.sh)
set -o pipefail
limit=${1:?usage: verify_each.sh SECONDS BUILD...}; shift
source .device/setup.sh
out=${OUT:-/tmp/coda-verify-each}/verify-each
mkdir -p "$out"
overs=0
for b in "$@"; do
  name=$(basename "$b")
  t0=$(date +%s%N)
  timeout -s ABRT "$limit" python3 -X faulthandler -u -m coda_spec.cli verify "$b" \
    --seed 20261201 --junit "$out/$name.junit.xml" > "$out/$name.log" 2>&1
  rc=$?
  t1=$(date +%s%N)
  printf '%-32s exit %3d  %6ds  %s\n' "$name" "$rc" "$(( (t1 - t0) / 1000000000 ))" \
    "$(grep -h '=>' "$out/$name.log" | tr -d '\n')" | tee -a "$out/summary.txt"
  if [ $rc -eq 134 ] || [ $rc -eq 124 ]; then overs=$((overs + 1)); else overs=0; fi
  [ $overs -ge 2 ] && { echo "two time-outs in a row: stopping" | tee -a "$out/summary.txt"; break; }
done
tar -czf "${OUT:-/tmp/coda-verify-each}/verify-each.tar.gz" -C "$out" .
