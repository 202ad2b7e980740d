# Sourced first by every benchmarks/*_device.sh: a device script that fails says so.
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
