#!/usr/bin/env bash
# Issue 32, item 1 on the lent H200: the two rulers side by side. `coda bench` of two llama3
# builds at M = 8192, timed by the sustained ruler (the default: each sample a 0.5-s stream of
# back-to-back calls at the power cap, SM clock and board power sampled) and by the isolated one
# (--isolated: one call per sample after an L2 flush), in one device call of about 4 minutes.
# Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/llama3_layer.yaml specs/llama3_last.yaml
# then on the device, with carry [".device", "build"]:
#   bash benchmarks/ruler_device.sh
# Parts, in order (the first two are the ones the docs need most; each stops by BUDGET_S,
# default 235 s, after the start, so a call's limit keeps what ran):
#   1. llama3_layer, sustained, vs eager          (about 90 s: 33 candidates x 3 x 0.6 s)
#   2. llama3_layer, isolated, vs eager           (about 30 s)
#   3. llama3_last (the LM head), sustained, SoL only (about 80 s)
#   4. llama3_last, isolated, SoL only            (about 25 s)
# Knobs: ROUNDS (sustained rounds, default 3), SUSTAIN_S (default 0.5), M (default 8192),
# LAYER_BASELINES (default eager), BUILDS (default "llama3_layer llama3_last").
# Logs and results (bench.json, bench.csv per part, the tables in *.log) go to
# /tmp/coda-ruler/ruler/, packed after every part into $OUT/ruler.tar.gz; the exit status is the
# first failing part's (benchmarks/device_status.sh). Afterwards, here:
#   coda bench ruler/layer-sustained/bench.json --compare ruler/layer-isolated/bench.json
BUDGET_S=${BUDGET_S:-235}
source benchmarks/device_status.sh  # pipefail; a failed part fails the script; left SECONDS
source .device/setup.sh
M=${M:-8192}
ROUNDS=${ROUNDS:-3}
SUSTAIN_S=${SUSTAIN_S:-0.5}
results ruler  # $out, pack, date.txt and gpu.txt (benchmarks/device_status.sh)
bench() {  # bench NAME BUILD SECONDS ARGS...: one coda bench, its table in NAME.log
  local name=$1 build=$2 secs=$3
  shift 3
  timeout "$(left "$secs")" python3 -u -m coda_spec.cli bench "build/$build-latest" --m "$M" \
    --out "$out/$name" "$@" 2>&1 | tee "$out/$name.log"
  pack
}
for b in ${BUILDS:-llama3_layer llama3_last}; do
  short=${b#llama3_}
  base=none
  [ "$short" = layer ] && base=${LAYER_BASELINES:-eager}
  bench "$short-sustained" "$b" 110 --baselines "$base" --rounds "$ROUNDS" --sustain-s "$SUSTAIN_S"
  bench "$short-isolated" "$b" 45 --baselines "$base" --isolated
done
finish  # exit with the first failure's status (benchmarks/device_status.sh)
