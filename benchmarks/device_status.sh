# Sourced first by benchmarks/device_run.sh (and step_device.sh, tune_cap_device.sh): a device
# run that fails says so. The one home of the budget helper (`left`), `results` and `pack`.
#
# The scripts run every part and pack the logs after each (a call's time limit keeps what ran),
# so they cannot stop at the first failure (set -e would lose the logs). Instead every command
# that fails -- a pipeline fails when any part of it does (pipefail), inside functions too
# (errtrace) -- records the first non-zero status, and `finish`, each script's last line, exits
# with it after the last pack: 0 only when everything ran clean.
set -o pipefail
set -o errtrace
device_status=0
trap 'rc=$?; [ "$device_status" -ne 0 ] || device_status=$rc; (exit $rc)' ERR
finish() { exit "$device_status"; }

# The time budget: every part's timeout is `$(left SECONDS)`, so the parts end BUDGET_S (default
# 570 s, inside the device tool's 600 s) after the script started, in time for the last pack.
end=$(( $(date +%s) + ${BUDGET_S:-570} ))
left() {  # left SECONDS: SECONDS, or what is left before the end (at least 1)
  local r=$(( end - $(date +%s) ))
  r=$(( r > $1 ? $1 : r )); echo $(( r < 1 ? 1 : r ))
}

# The results folder of the scripts that time at the power cap: `results NAME` makes
# /tmp/coda-NAME/NAME ($out) afresh (a lent machine can keep /tmp from an earlier call, even an
# earlier session's), records the board as found (date.txt; gpu.txt: its cap, its clocks and
# which telemetry source the samplers will find) and packs it; `pack` tars $out into
# $OUT/NAME.tar.gz, after every part.
results() {
  results_name=$1
  out=/tmp/coda-$1/$1
  rm -rf "$out"  # never pack an earlier run's logs
  mkdir -p "$out"
  date -u > "$out/date.txt"
  nvidia-smi --query-gpu=name,driver_version,power.limit,enforced.power.limit,clocks.max.sm,clocks.sm,power.draw \
    --format=csv > "$out/gpu.txt" 2>&1
  python3 -c "import pynvml; print('pynvml', pynvml.__file__)" >> "$out/gpu.txt" 2>&1 \
    || echo "no pynvml: the samplers read nvidia-smi" >> "$out/gpu.txt"
  pack
}
pack() { tar -czf "${OUT:-/tmp/coda-$results_name}/$results_name.tar.gz" -C "$out" .; }
