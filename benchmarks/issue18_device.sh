#!/usr/bin/env bash
# Issue 18 on the lent H200: the runtime package over the typed manifest changes no result and
# no host time. Here (no GPU), first:
#   bash ../shared/device/pack.sh
#   coda build specs/*.yaml tests/gpu/mutant_rmsnorm_chain.yaml tests/specs_extra/softcap_logits.yaml
#   and, for the before/after host time, the last landed runtime and its builds in .old/:
#   git worktree add /tmp/old e985ce4 && mkdir -p .old && cp -r /tmp/old/coda_spec .old/ &&
#   mkdir -p .old/benchmarks && cp /tmp/old/benchmarks/host_overhead.py .old/benchmarks/ &&
#   (cd /tmp/old && PYTHONPATH=$PWD python -m coda_spec.cli build -o "$OLDROOT/.old/build" \
#      specs/{f2_deferred_norm,rmsnorm_chain,b4_ce_fwd_bwd,llama_block}.yaml)  # format 6
#   where OLDROOT is this checkout's root
# then on the device, with carry [".device", "build", ".old"]:
#   bash benchmarks/issue18_device.sh all     # host time before/after, tests/gpu, verify
# Logs go to $OUT/<part>/ and are packed into $OUT/<part>.tar.gz.
source benchmarks/device_status.sh  # pipefail; a failed part fails the script
part=${1:?usage: issue18_device.sh verify|gates|overhead|all}
source .device/setup.sh
root=${OUT:-/tmp/coda-issue18}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$root/gpu.txt" 2>&1
chains=(f2_deferred_norm-latest rmsnorm_chain-latest b4_ce_fwd_bwd-latest llama_block-latest)
run_part() {
  local p=$1 out=$root/$1
  mkdir -p "$out"
  case $p in
    verify)
      # shellcheck disable=SC2046
      OUT=$out bash benchmarks/verify_each.sh "${VERIFY_EACH_S:-90}" $(ls -d build/*-latest)
      ;;
    gates)
      timeout "${GPU_TESTS_S:-420}" python3 -m pytest tests/gpu -q -rA -p no:cacheprovider \
        2>&1 | tee "$out/gpu-tests.log"
      ;;
    overhead)
      # the same script, machine and minute for both runtimes: after (this tree) and before
      # (.old), in that order, then again in the other order (host time drifts within a run)
      for round in 1 2; do
        if [ $round = 1 ]; then order=(after before); else order=(before after); fi
        for side in "${order[@]}"; do
          if [ $side = after ]; then
            timeout 100 python3 benchmarks/host_overhead.py "${chains[@]/#/build/}" \
              --m 256 --calls 400 --out "$out/after$round.json" 2>&1 | tee "$out/after$round.log"
          elif [ -d .old/coda_spec ]; then  # the old script beside the old package
            PYTHONPATH=$PWD/.old:/tmp/site timeout 100 python3 .old/benchmarks/host_overhead.py \
              "${chains[@]/#/.old/build/}" --m 256 --calls 400 --out "$out/before$round.json" \
              2>&1 | tee "$out/before$round.log"
          fi
        done
      done
      ;;
  esac
  tar -czf "$root/$p.tar.gz" -C "$out" .
}
if [ "$part" = all ]; then
  for p in overhead gates verify; do run_part $p; done
else
  run_part "$part"
fi
finish  # exit with the first failure's status (benchmarks/device_status.sh)
