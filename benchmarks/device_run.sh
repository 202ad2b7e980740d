#!/usr/bin/env bash
# The device-run driver: every measurement the project runs on the lent GPU, as named phases.
#
#   bash benchmarks/device_run.sh --list               # the phases and recipes, and how long
#   bash benchmarks/device_run.sh PHASE [PHASE ...]    # on the device, in that order
#
# Here (no GPU), first: `bash ../shared/device/pack.sh`, and the builds the phase's line in
# --list names (`coda build ...`); then on the device, with carry [".device", "build"] (and the
# other folders the line names). Knobs are environment variables, listed per phase.
#
# One home for the budget, the results folder and the exit status: benchmarks/device_status.sh
# (sourced once, below). The phases share one budget: every part's timeout is `$(left SECONDS)`,
# so the run ends BUDGET_S (default 570 s, inside the device tool's 600 s) after it started, in
# time for the last pack. Each phase writes /tmp/coda-PHASE/PHASE/ (`results PHASE`), packed after
# every part into $OUT/PHASE.tar.gz, so a call's time limit keeps what ran. A part that fails does
# not stop the run; each phase says `== PHASE: exit N`, and the run exits with the first failing
# part's status (0: everything ran clean), 2 for an unknown phase (nothing run).
#
# step and tune-cap run benchmarks/step_device.sh and benchmarks/tune_cap_device.sh (the current
# tools, kept as scripts; their headers list their parts and knobs) inside this run's budget.
#
# The retired scripts (issueNN_device.sh, grad_device.sh, ...: each phase's line names its own)
# kept the build commands of their runs in their headers: `git show 6a63246:benchmarks/NAME.sh`.
#
# The phase table: NAME | about how long | what it runs (the former script it replaces).
PHASES="gates|4-7 min|pytest tests/gpu (GPU_TESTS: files, default tests/gpu; GPU_K: -k; GATES_ROOT: an older checkout run against the same builds; GATES_JOBS: pytest processes at once) (formerly issue11_device.sh gates, issue18_device.sh gates, device_gates.sh, runtime_device.sh gates)
verify|2-7 min|coda verify of VERIFY_BUILDS (default every build/*-latest) in one process, junit (formerly runtime_device.sh verify, device_gates.sh)
verify-each|1-9 min|coda verify of each of VERIFY_BUILDS in its own process, VERIFY_EACH_S (90) each, a stack dump on time-out (formerly verify_each.sh, issue11_device.sh verify, issue18_device.sh verify)
host-overhead|1-3 min|benchmarks/host_overhead.py of f2, rmsnorm_chain, b4, llama_block; before/after twice when .old/ holds the old runtime (formerly issue18_device.sh overhead)
bench|3-9 min|coda bench --isolated of SPECS (specs/*.yaml) at WIDTH (2048), MS (16384), ROUNDS (15), BENCH_ARGS (formerly bench_catalogue.sh, runtime_device.sh bench)
ops|5-9 min|tests/gpu/test_ops_gpu.py, host-overhead, the rest of tests/gpu (formerly issue19_device.sh)
llama|6-9 min|the Llama from specs: verify of the llama3 builds, op tests, llama_h200.py parity and compile, a train_step (SKIP_CHECKS=1: the last three) (formerly issue20_device.sh)
llama-tune|5 min|coda tune --isolated of the llama3 builds at M = 8192, 1B and 8B-like dims (formerly issue21_device.sh PHASE=tune)
llama-step1b|9 min|train_step 1B 2x4096 eager modes (fwdbwd, adamw), examples/train_llama.py 500 steps twice, example_grads.py, the compiled modes (formerly issue21_device.sh PHASE=step1b)
llama-shapes|9 min|train_step at 1B, 1x8192 and 8B-like, the example against fp32, the fresh chains' tune (build-fresh), compile at 2 and 8 layers (formerly issue21_device.sh PHASE=shapes)
llama-compile|5 min|train_step coda-compile at 1B 2x4096 (formerly issue21_device.sh PHASE=compile)
features-verify|9 min|coda verify of FEATURE_SPECS and the tutorial's chain, their GPU tests, every primitive's conformance (formerly issue22_device.sh PHASE=verify)
features-bench|9 min|the tutorial's training loop beside PyTorch, coda bench of BENCH_SPECS (build-bench) vs eager and compile (formerly issue22_device.sh PHASE=bench)
llama-verify|6-9 min|coda verify of llama3_first, llama3_layer, llama3_last at their real shapes (formerly issue31_device.sh PHASE=llama3)
lifted-checks|3-6 min|coda verify of LIFTED_SPECS (fp32 pair stores, reduce_col in a host step), their GPU tests (formerly issue31_device.sh PHASE=checks)
llama-mask|5-9 min|llama_h200.py parity with a padded attention_mask (pad 64 and 0) and compile with it, LAYERS (2) (formerly issue31_device.sh PHASE=model)
grad|4-9 min|coda verify of the derived specs (DERIVED), coda bench of hand-written vs derived (PAIRS) (formerly grad_device.sh)
dist|5-9 min|benchmarks/train_dist.py under torchrun, NPROC GPUs, the RUNS pairs; PARITY=1 first (formerly dist_device.sh)
ruler|4 min|coda bench of llama3_layer and llama3_last by the sustained and the isolated ruler (formerly ruler_device.sh)
step|9 min|benchmarks/step_device.sh: the Llama step re-measured and its GEMMs with the rulers' prediction (PARTS)
memory|1 min|benchmarks/step_device.sh PARTS=memory: memory_peak.py at the 8B-like shape, coda and Liger
compile-warm|2-4 min|the compiled modes' first steps (WARM_MODES: hf-compile,hf-compile-nomask,coda-compile,coda-graphs) at WARM_SHAPES (the three step shapes), WARM_JOBS (6) processes at once, into the inductor cache; packed as \$OUT/inductor.tar.gz.00, .01, ... (15 MiB parts: a returned file holds 16 MiB), which a later call unpacks with INDUCTOR_TAR=.device/inductor.tar.gz (issue 33: the step table's compiled modes then fit one call)
compile-depth|2-8 min|benchmarks/compile_depth.py: the first compiled step at LAYERS (2,4,8) of MODE (coda-compile), each its own process and cache, CPROFILE (4) profiled, DEPTH_S (120) each
profile|1-2 min|train_step --profile of PROFILE_MODES (coda) at SHAPE (1b-2x4096), STEPS (5): the kernel families and the copy/cast/fill kernels by launch site
tune-cap|9 min|benchmarks/tune_cap_device.sh: the llama3 builds re-tuned at the power cap (BUILDS, MS, DIMS)
catalogue-tune|6 min|coda tune --isolated of every staged build (ROOT, build/stage) at D = 2048/4096/8192 (formerly catalogue_tuned.sh tune)
catalogue-bench|9 min|coda bench of the staged builds, MODE (tuned/untuned) at WIDTHS, BASELINES (formerly catalogue_tuned.sh bench)
variants-tune|9 min|coda tune of multi-variant staged builds (VARIANTS_TUNE: spec names, default all), verify of every variant (VARIANTS_VERIFY), bench tuned (VARIANTS_BENCH) (formerly tune_catalogue.sh)
b2-sweep|8 min|b2 under eight tile configs (build/sweep) vs compile and Liger, an Nsight Compute source profile (formerly b2_config_sweep.sh)
b2-epilogue|9 min|b2's candidates (ROOT, build/explore) tuned, verified, benched; Nsight Compute of NCU_VARIANTS (formerly b2_epilogue.sh)
families|9 min|benchmarks/family_parity.py (PARITY=0: skipped) of FAMILY_SHAPES at 2 layers, coda verify of FAMILY_BUILDS (default every build/{qwen2,qwen3,gemma3,olmo2}_*-latest) at their spec dims, then train_step of FAMILY_SHAPES (the four 1B-class shapes) x FAMILY_MODES (coda,liger,hf,hf-compile-nomask), profiled, STEPS (10), one JSON (issue 35)
reasons|8 min|Nsight Compute of NCU_TARGETS beside cuBLAS, torch.profiler of PROF_TARGETS (formerly profile_reasons.sh)"

# Recipes: what a past run did, as a command of this driver (the knobs above, no new phase).
RECIPES="issue 7's gates (2026-12-01): VERIFY_BUILDS=\"build/rmsnorm_chain-latest build/b1_dgrad_rmsnorm_bwd-latest build/f5_norm_lmhead_lse-latest build/llama_block-latest\" bash benchmarks/device_run.sh gates verify
issue 10's runtime: bash benchmarks/device_run.sh gates host-overhead; then verify; then SPECS=\"specs/b3_rope_bwd.yaml specs/b4_ce_fwd_bwd.yaml specs/llama_block.yaml\" WIDTH=4096 BENCH_ARGS=\"--baselines eager,compile\" bash benchmarks/device_run.sh bench
issue 11: bash benchmarks/device_run.sh verify-each; then gates
issue 18: bash benchmarks/device_run.sh host-overhead gates verify-each   (carry .old too)
the catalogue bench at D = 4096: WIDTH=4096 MS=16384,4096 bash benchmarks/device_run.sh bench
issue 33's step (2026-12-03, calls 3 and 4): BUDGET_S=500 VERIFY_BUILDS=build/llama3_lm_head-latest VERIFY_ARGS=\"--dims M=2048,V=16384\" VERIFY_S=60 TUNED_OLD=coda_spec/tuned/h200.json MODES=coda,coda-compile,coda-graphs,liger,hf-compile-nomask SHAPE_MODES=coda,liger,hf-compile-nomask STEP1B_S=230 STEPS=10 WARMUP=2 PARTS=\"step1b shapes\" bash benchmarks/device_run.sh verify step
issue 33's step table in one call (2026-12-04, on one warm machine): BUDGET_S=400 WARM_JOBS=6 WARM_S=300 bash benchmarks/device_run.sh compile-warm; then BUDGET_S=580 TUNED_OLD=coda_spec/tuned/h200.json MODES=coda,coda-compile,coda-graphs,liger,hf,hf-compile-nomask,hf-compile PARTS=\"table adamw\" ADAMW_S=75 ADAMW_MODES=coda-graphs,hf-compile-nomask STEPS=10 WARMUP=2 MODE_S=120 bash benchmarks/device_run.sh step
issue 35's family steps in one call (not run yet; the cache filled first, on the same machine): WARM_SHAPES=\"qwen2-1.5b-2x4096 qwen3-1.7b-2x4096 gemma3-1b-2x4096 olmo2-1b-2x4096\" WARM_MODES=hf-compile-nomask bash benchmarks/device_run.sh compile-warm; then PARITY=0 STEPS=10 WARMUP=2 MODE_S=100 bash benchmarks/device_run.sh families
issue 32's rest (not run yet): the 8B-like llama3_first and llama3_layer at M = 16384, then every llama3 kernel against cuBLAS at the cap: BUILDS=\"llama3_first llama3_layer\" MS=16384 DIMS=8b BARE=0 ROUNDS=1 bash benchmarks/device_run.sh tune-cap"

show_list() {
  echo "Phases (bash benchmarks/device_run.sh PHASE [PHASE ...]; about how long; what):"
  while IFS='|' read -r name mins what; do
    printf '  %-16s %-8s %s\n' "$name" "$mins" "$what"
  done <<< "$PHASES"
  echo
  echo "Recipes (past runs as commands):"
  while IFS= read -r line; do echo "  $line"; done <<< "$RECIPES"
}

known() { grep -q "^$1|" <<< "$PHASES"; }

case "${1:-}" in
--list | -h | --help) show_list; exit 0 ;;
"") show_list >&2; echo "device_run.sh: error: no phase named" >&2; exit 2 ;;
esac
for p in "$@"; do
  known "$p" || { echo "device_run.sh: error: unknown phase '$p' (the phases: --list)" >&2; exit 2; }
done

source benchmarks/device_status.sh  # pipefail, the first failure's status, left, results, pack
source .device/setup.sh
export CODA_SETUP_DONE=1
# torch.compile's caches (inductor's FX graphs, AOTAutograd's, the Triton kernels) in one folder:
# compile-warm packs it, INDUCTOR_TAR (a path, e.g. .device/inductor.tar.gz) unpacks an earlier
# call's, so a compiled mode's first step is a warm-cache one (the cold ones: compile-warm's log)
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/coda-inductor}
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
if [ -n "${INDUCTOR_TAR:-}" ]; then  # the parts compile-warm wrote: INDUCTOR_TAR.00, .01, ...
  cat "$INDUCTOR_TAR".[0-9][0-9] | tar -xz -C "$TORCHINDUCTOR_CACHE_DIR" || {
    echo "device_run.sh: error: cannot unpack INDUCTOR_TAR=$INDUCTOR_TAR.NN" >&2; exit 2; }
  echo "inductor cache: $INDUCTOR_TAR.* unpacked into $TORCHINDUCTOR_CACHE_DIR" \
    "($(du -sh "$TORCHINDUCTOR_CACHE_DIR" | cut -f1))"
fi

# -- the parts the phases share --------------------------------------------------------------
run() {  # run LOG SECONDS COMMAND...: COMMAND within the budget, its output (less DEBUG) in LOG
  local log=$1 secs=$2
  shift 2
  timeout "$(left "$secs")" "$@" 2>&1 | { grep -v DEBUG || true; } | tee "$out/$log"
  pack
}
gpu_tests() {  # gpu_tests LOG SECONDS PYTEST-ARGS...
  local log=$1 secs=$2
  shift 2
  run "$log" "$secs" python3 -m pytest -q -rfE -p no:cacheprovider "$@"
}
all_builds() { ls -d build/*-latest; }
host_overhead() {  # host_overhead NAME ROOT: the four chains of ROOT (build or .old/build)
  local script=benchmarks/host_overhead.py
  [ "$2" = build ] || script=.old/benchmarks/host_overhead.py
  local chains=(f2_deferred_norm rmsnorm_chain b4_ce_fwd_bwd llama_block)
  chains=("${chains[@]/#/$2/}")
  if [ "$2" = build ]; then
    run "$1.log" 120 python3 "$script" "${chains[@]/%/-latest}" --m 256 --calls 400 \
      --out "$out/$1.json"
  else  # the old script beside the old package
    PYTHONPATH=$PWD/.old:/tmp/site run "$1.log" 100 python3 "$script" "${chains[@]/%/-latest}" --m 256 \
      --calls 400 --out "$out/$1.json"
  fi
}
train_step() {  # train_step SHAPE KIND MODES TIMEOUT [ARGS...]: one train_step.py, profiled
  local shape=$1 kind=$2 modes=$3 secs=$4
  shift 4
  local name="step-$shape-$kind-${modes//,/+}"
  run "$name.log" $((secs * 4 + 30)) python3 benchmarks/train_step.py --modes "$modes" \
    --shape "$shape" --kind "$kind" --profile --timeout "$secs" --out "$out/$name.json" "$@"
}
llama_h200() {  # llama_h200 NAME SECONDS parity|compile ARGS...
  local name=$1 secs=$2
  shift 2
  run "$name.log" "$secs" python3 benchmarks/llama_h200.py "$@" --out "$out/$name.json"
}
example() {  # example NAME SECONDS ARGS...: examples/train_llama.py, its progress lines kept
  local name=$1 secs=$2
  shift 2
  timeout "$(left "$secs")" python3 examples/train_llama.py --builds build --steps 500 "$@" \
    --out "$out/$name" 2>&1 | tr '\r' '\n' | { grep -E "^(corpus|coda|transf|median|fp32)|100%" || true; } \
    | tee "$out/$name.log"
  pack
}
nsight() {  # nsight NAME SECONDS PROFILE-ARGS...: Nsight Compute of coda's NVTX ranges, then its tables
  local name=$1 secs=$2 bin
  shift 2
  bin=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
  timeout "$(left "$secs")" "${bin:-ncu}" --nvtx --nvtx-include "coda/" --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy \
    --import-source no -f -o "$out/$name" python3 benchmarks/profile_reasons.py ncu "$@" \
    > "$out/$name-profile.log" 2>&1
  "${bin:-ncu}" -i "$out/$name.ncu-rep" --page source --csv --print-source sass \
    > "$out/$name-sass.csv" 2> "$out/$name-source.err" && gzip -f "$out/$name-sass.csv"
  "${bin:-ncu}" -i "$out/$name.ncu-rep" --page details --print-details all \
    > "$out/$name-details.txt" 2>&1
  rm -f "$out/$name.ncu-rep"
  pack
}

# -- the phases ------------------------------------------------------------------------------
phase_gates() {  # GATES_ROOT: an older checkout (git worktree add .old-tree COMMIT; carry it)
  local root=${GATES_ROOT:-.}
  [ "$root" = . ] || ln -sfn "$PWD/build" "$root/build"  # the same builds: before/after a change
  # the checkout's own package first (setup.sh put this root's on PYTHONPATH); the subshell exits
  # with its first failure's status, so the script's does too (device_status.sh)
  # shellcheck disable=SC2086
  (
    cd "$root" && export PYTHONPATH=$PWD:$PYTHONPATH
    tag=${GATES_ROOT:+-$(basename "$root")}
    if [ "${GATES_JOBS:-1}" -le 1 ]; then
      gpu_tests "gpu-tests$tag.log" "${GPU_TESTS_S:-420}" -rA ${GPU_TESTS:-tests/gpu} \
        ${GPU_K:+-k "$GPU_K"}
    else  # GATES_JOBS pytest processes at once on the one GPU, the longest files first
      mapfile -t files < <(gates_files)
      pids=()
      for ((j = 0; j < GATES_JOBS; j++)); do
        group=()
        for ((i = j; i < ${#files[@]}; i += GATES_JOBS)); do group+=("${files[i]}"); done
        [ ${#group[@]} -gt 0 ] || continue
        (gpu_tests "gpu-tests$tag-$j.log" "${GPU_TESTS_S:-420}" -v -rA "${group[@]}" \
          ${GPU_K:+-k "$GPU_K"} > /dev/null; exit "$device_status") &
        pids+=($!)
      done
      for pid in "${pids[@]}"; do wait "$pid"; done
      pack
    fi
    exit "$device_status"
  )
}
gates_files() {  # tests/gpu's files (GPU_TESTS's when given), the longest first (each worker
  # takes every GATES_JOBS-th)
  if [ -n "${GPU_TESTS:-}" ]; then tr ' ' '\n' <<< "$GPU_TESTS" | grep .; return; fi
  local f heavy="test_chains_on_gpu test_primitive_conformance_gpu test_training test_ops_gpu"
  for f in $heavy; do [ -f "tests/gpu/$f.py" ] && echo "tests/gpu/$f.py"; done
  for f in tests/gpu/test_*.py; do
    case " $heavy " in *" $(basename "$f" .py) "*) ;; *) echo "$f" ;; esac
  done
}
phase_verify() {
  # shellcheck disable=SC2046,SC2086
  run verify.log "${VERIFY_S:-420}" python3 -u -m coda_spec.cli verify ${VERIFY_BUILDS:-$(all_builds)} \
    --seed "${SEED:-20261201}" --junit "$out/verify.junit.xml" ${VERIFY_ARGS:-}
}
phase_verify_each() {  # stops after two chains in a row run over their limit
  local overs=0 b name t0 code limit
  # shellcheck disable=SC2046,SC2086
  for b in ${VERIFY_BUILDS:-$(all_builds)}; do
    name=$(basename "$b")
    t0=$(date +%s)
    limit=$(left "${VERIFY_EACH_S:-90}")
    timeout -s ABRT "$limit" python3 -X faulthandler -u -m coda_spec.cli verify "$b" \
      --seed "${SEED:-20261201}" --junit "$out/$name.junit.xml" > "$out/$name.log" 2>&1
    code=$?
    printf '%-32s exit %3d  %6ds  %s\n' "$name" "$code" "$(($(date +%s) - t0))" \
      "$(grep -h '=>' "$out/$name.log" | tr -d '\n')" | tee -a "$out/summary.txt"
    if [ $code -eq 134 ] || [ $code -eq 124 ]; then overs=$((overs + 1)); else overs=0; fi
    [ $overs -lt 2 ] || { echo "two time-outs in a row: stopping" | tee -a "$out/summary.txt"; break; }
    pack
  done
}
phase_host_overhead() {
  if [ ! -d .old/coda_spec ]; then host_overhead host_overhead build; return; fi
  # the same machine and minute for both runtimes, in both orders (host time drifts in a run)
  host_overhead after1 build
  host_overhead before1 .old/build
  host_overhead before2 .old/build
  host_overhead after2 build
}
phase_bench() {
  # shellcheck disable=SC2086
  run bench.log "${BENCH_S:-540}" python3 -m coda_spec.cli bench --isolated ${SPECS:-specs/*.yaml} \
    --width "${WIDTH:-2048}" --m "${MS:-16384}" --rounds "${ROUNDS:-15}" --out "$out" ${BENCH_ARGS:-}
}
phase_ops() {
  gpu_tests ops-tests.log 200 -rA tests/gpu/test_ops_gpu.py
  host_overhead host_overhead build
  gpu_tests gpu-tests.log 200 tests/gpu --deselect tests/gpu/test_ops_gpu.py
}
phase_llama() {
  if [ -z "${SKIP_CHECKS:-}" ]; then
    run verify.log 150 python3 -m coda_spec.cli verify build/llama3_first-latest \
      build/llama3_layer-latest --seed 1
    run verify-last.log 150 python3 -m coda_spec.cli verify build/llama3_last-latest --seed 1 \
      --dims M=4096
    gpu_tests gpu-tests.log 150 tests/gpu/test_ops_gpu.py tests/gpu/test_verify_gpu.py
  fi
  llama_h200 parity 150 parity --seq 2048
  llama_h200 compile 150 compile --layers 2 --seq 2048
  train_step 1b-2x4096 fwdbwd hf,hf-compile-nomask,coda,coda-compile 75
}
LLAMA3="build/llama3_first-latest build/llama3_layer-latest build/llama3_last-latest"
LLAMA3="$LLAMA3 build/llama3_layer_recompute-latest build/llama3_last_recompute-latest"
phase_llama_tune() {
  # shellcheck disable=SC2086
  run tune-1b.log 150 python3 -m coda_spec.cli tune --isolated $LLAMA3 --m 8192 --out "$out/h200.json"
  # shellcheck disable=SC2086
  run tune-8b.log 150 python3 -m coda_spec.cli tune --isolated $LLAMA3 --m 8192 \
    --dims D=4096,F=14336,HD=128 --out "$out/h200.json"
}
phase_llama_step1b() {
  train_step 1b-2x4096 fwdbwd coda,hf,liger,coda-recompute 60
  train_step 1b-2x4096 adamw coda,hf,liger 60
  example example 150 --repeat
  run example-grads.log 90 python3 benchmarks/example_grads.py --builds build --pretrain 100 \
    --out "$out/example-grads.json"
  train_step 1b-2x4096 fwdbwd coda-compile,hf-compile-nomask 150
}
phase_llama_shapes() {
  local n
  train_step 1b-2x4096 fwdbwd coda,hf,liger 60
  example example 120 --reference
  train_step 1b-2x4096 fwdbwd hf-compile 120
  train_step 1b-1x8192 fwdbwd coda,hf,liger 60
  train_step 8b-layer4-2x4096 fwdbwd coda,hf,liger 60
  run tune-fresh.log 90 python3 -m coda_spec.cli tune --isolated build-fresh/fresh*-latest \
    --m 8192,16384 --out "$out/fresh-h200.json"
  for n in 2 8; do  # why coda-compile's first step is slow: does it grow with depth?
    TORCH_LOGS=recompiles llama_h200 "compile-$n" 90 compile --layers $n --seq 4096
  done
}
phase_llama_compile() { train_step 1b-2x4096 fwdbwd coda-compile 280; }
xs=tests/specs_extra
FEATURE_SPECS=${FEATURE_SPECS:-"$xs/gqa_qknorm_rope.yaml $xs/fp8_out_amax.yaml $xs/dropout_residual.yaml
  $xs/fp8_out_amax_host.yaml $xs/masked_residual.yaml $xs/philox_exact.yaml $xs/scale_dims.yaml
  specs/f7_qk_norm_rope.yaml $xs/fp8_gemm.yaml $xs/layer_norm_var.yaml $xs/rope_half_host.yaml"}
FEATURE_TESTS=${FEATURE_TESTS:-"tests/gpu/test_fp8_gpu.py tests/gpu/test_philox_gpu.py
  tests/gpu/test_head_ranges_gpu.py tests/gpu/test_fp8_gemm_gpu.py
  tests/gpu/test_finalize_stats_gpu.py"}
# the test specs at model-sized dims, built into build-bench/ (docs/tutorial.md says how)
BENCH_SPECS=${BENCH_SPECS:-"$xs/gqa_qknorm_rope.yaml build-bench/fp8_out_amax-latest
  build-bench/dropout_residual-latest build-bench/fp8_gemm-latest build-bench/rope_half_host-latest
  examples/tutorial/relu2_mlp.yaml"}
phase_features_verify() {
  # shellcheck disable=SC2086
  run verify-features.log 150 python3 -m coda_spec.cli verify examples/tutorial/relu2_mlp.yaml \
    $FEATURE_SPECS --seed 20261202
  # shellcheck disable=SC2086
  gpu_tests gpu-tests.log 150 -m gpu $FEATURE_TESTS
  gpu_tests gpu-conformance.log 400 -m gpu tests/gpu/test_primitive_conformance_gpu.py
}
phase_features_bench() {
  if [ -z "${NO_TRAIN:-}" ]; then
    run train.log 120 python3 examples/tutorial/train_relu2.py --build build/relu2_mlp-latest \
      --steps 200 --torch
  fi
  # shellcheck disable=SC2086
  run bench.log 420 python3 -m coda_spec.cli bench --isolated $BENCH_SPECS --m 16384 \
    --baselines eager,compile --rounds 20 --out "$out/bench"
}
phase_llama_verify() {
  local b
  for b in llama3_first llama3_layer llama3_last; do
    run "verify-$b.log" 240 python3 -u -m coda_spec.cli verify "build/$b-latest" --seed 20261203 \
      --junit "$out/verify-$b.junit.xml"
  done
}
# the lifted limits of issue 31: fp32 stores in an acc_pair kernel, reduce_col in a host step (its
# conformance build and the derived biased GELU MLP backward)
LIFTED_SPECS=${LIFTED_SPECS:-"build/swiglu_fp32_aux-latest build/prim_reduce_col-latest build/gelu_mlp-latest"}
phase_lifted_checks() {
  # shellcheck disable=SC2086
  run verify-lifted.log 200 python3 -m coda_spec.cli verify $LIFTED_SPECS --seed 20261203
  gpu_tests gpu-pair-f32.log 150 -m gpu tests/gpu/test_pair_f32_gpu.py
  gpu_tests gpu-conformance-reduce-col.log 150 -m gpu tests/gpu/test_primitive_conformance_gpu.py \
    -k reduce_col
}
phase_llama_mask() {
  local pad
  for pad in 64 0; do
    llama_h200 "parity-pad$pad" 200 parity --layers "${LAYERS:-2}" --pad $pad
  done
  llama_h200 compile-pad64 200 compile --layers "${LAYERS:-2}" --pad 64
}
phase_grad() {
  local derived line name
  derived="${DERIVED:-$(ls specs/grad/*.yaml)} ${EXTRA_DERIVED:-}"
  # shellcheck disable=SC2086
  [ -n "${BENCH_ONLY:-}" ] || run verify-derived.log 240 python3 -m coda_spec.cli verify $derived \
    --seed 20261202
  while read -r line <&3; do  # each line: the hand-written target, then derived ones
    [ -n "$line" ] || continue
    name=$(basename "${line##* }" .yaml)
    # shellcheck disable=SC2086
    run "bench-$name.log" 240 python3 -m coda_spec.cli bench --isolated $line --m 16384 \
      --baselines "${BASELINES:-none}" --out "$out/bench-$name"
  done 3<<< "${PAIRS:-"specs/llama_block.yaml specs/grad/llama_block.yaml
examples/tutorial/relu2_mlp.yaml specs/grad/relu2_mlp_tutorial.yaml"}"  # fd 3: not eaten
}
phase_dist() {
  local nproc=${NPROC:-1} wrap mode small=${SMALL:-"--layers 2 --seq 1024"} ref=${REF:-$out}
  dist_run() {  # dist_run NAME ARGS...: one torchrun, its row in NAME.json
    local name=$1
    shift
    run "$name.log" 200 torchrun --nproc_per_node "$nproc" benchmarks/train_dist.py "$@" \
      --out "$out/$name.json"
  }
  if [ -n "${PARITY:-}" ]; then  # 5 AdamW steps on fixed data: NPROC=1 dumps, >1 compares
    for wrap in fsdp2 ddp; do
      if [ "$nproc" = 1 ]; then
        # shellcheck disable=SC2086
        dist_run "parity-$wrap-1" --wrap $wrap --mode coda $small --parity 5 --dump "$out/ref-$wrap.pt"
        # shellcheck disable=SC2086
        dist_run "parity-$wrap-1-micro2" --wrap $wrap --mode coda $small --parity 5 --micro 2 \
          --compare "$out/ref-$wrap.pt"
      else
        # shellcheck disable=SC2086
        dist_run "parity-$wrap-$nproc" --wrap $wrap --mode coda $small --parity 5 \
          --compare "$ref/ref-$wrap.pt"
        # shellcheck disable=SC2086
        dist_run "parity-$wrap-$nproc-micro2" --wrap $wrap --mode coda $small --parity 5 \
          --micro 2 --compare "$ref/ref-$wrap.pt"
      fi
    done
  fi
  while read -r wrap mode <&3; do
    [ -n "$wrap" ] || continue
    dist_run "$wrap-$mode-$nproc" --wrap "$wrap" --mode "$mode" --steps "${STEPS:-8}" --warmup 2
  done 3<<< "${RUNS:-"fsdp2 coda
ddp coda
fsdp2 coda-compile
fsdp2 hf-compile
ddp hf-compile"}"  # fd 3: a command in the loop cannot eat the lines
}
phase_ruler() {
  local b short base
  for b in ${RULER_BUILDS:-llama3_layer llama3_last}; do
    short=${b#llama3_}
    base=none
    [ "$short" = layer ] && base=${LAYER_BASELINES:-eager}
    run "$short-sustained.log" 110 python3 -u -m coda_spec.cli bench "build/$b-latest" \
      --m "${M:-8192}" --out "$out/$short-sustained" --baselines "$base" \
      --rounds "${ROUNDS:-3}" --sustain-s "${SUSTAIN_S:-0.5}"
    run "$short-isolated.log" 45 python3 -u -m coda_spec.cli bench "build/$b-latest" \
      --m "${M:-8192}" --out "$out/$short-isolated" --baselines "$base" --isolated
  done
}
phase_compile_depth() {
  run compile-depth.log $(( ${DEPTH_S:-120} * 3 + 10 )) python3 benchmarks/compile_depth.py \
    --layers "${LAYERS:-2,4,8}" --mode "${MODE:-coda-compile}" --cprofile "${CPROFILE:-4}" \
    --timeout "${DEPTH_S:-120}" --out "$out"
}
phase_compile_warm() {  # the compiled modes' first steps, WARM_JOBS at once (their times are
  # contended: a cache filler, not a measurement), then the cache packed for a later call
  local shape mode pid
  for shape in ${WARM_SHAPES:-1b-2x4096 1b-1x8192 8b-layer4-2x4096}; do
    for mode in ${WARM_MODES:-hf-compile hf-compile-nomask coda-compile coda-graphs}; do
      while [ "$(jobs -rp | wc -l)" -ge "${WARM_JOBS:-6}" ]; do wait -n; done
      timeout "$(left "${WARM_S:-240}")" python3 benchmarks/train_step.py --shape "$shape" \
        --modes "$mode" --steps 1 --warmup 0 --timeout "${WARM_S:-240}" \
        --out "$out/warm-$shape-$mode.json" > "$out/warm-$shape-$mode.log" 2>&1 &
    done
  done
  for pid in $(jobs -p); do wait "$pid"; done
  grep -H "GiB\|failed" "$out"/warm-*.log | tee "$out/warm.txt"
  rm -f "${OUT:-/tmp}"/inductor.tar.gz.[0-9][0-9]
  tar -cz -C "$TORCHINDUCTOR_CACHE_DIR" . | split -b 15m -d - "${OUT:-/tmp}/inductor.tar.gz."
  echo "inductor cache: $(du -sh "$TORCHINDUCTOR_CACHE_DIR" | cut -f1), packed in" \
    "$(ls "${OUT:-/tmp}"/inductor.tar.gz.[0-9][0-9] | wc -l) parts of at most 15 MiB" \
    | tee -a "$out/warm.txt"
}
phase_profile() {
  train_step "${SHAPE:-1b-2x4096}" fwdbwd "${PROFILE_MODES:-coda}" 120 --steps "${STEPS:-5}"
}
OWN_RESULTS="step memory tune-cap"  # their scripts write $OUT/step.tar.gz, $OUT/tune.tar.gz
phase_step() { BUDGET_S=$(left 560) bash benchmarks/step_device.sh; }
phase_memory() {  # step_device.sh's memory part needs no old table: any file will do
  PARTS=memory TUNED_OLD=${TUNED_OLD:-coda_spec/tuned/h200.json} BUDGET_S=$(left 90) \
    bash benchmarks/step_device.sh
}
phase_tune_cap() { BUDGET_S=$(left 570) bash benchmarks/tune_cap_device.sh; }
staged() { ls -d "${ROOT:-build/stage}"/*-[0-9a-f]*; }
phase_catalogue_tune() {
  # shellcheck disable=SC2046
  run tune.log 330 python3 -m coda_spec.cli tune --isolated $(staged) --width 2048,4096,8192 \
    --m 16384 --rounds "${TUNE_ROUNDS:-30}" --out "$out/h200.json"
}
phase_catalogue_bench() {  # MODE=untuned: every kernel at its fallback (the default config)
  local tuned=${TUNED_FILE:-coda_spec/tuned/h200.json}
  [ "${MODE:-tuned}" = untuned ] && tuned=$out/empty-tune-dir && mkdir -p "$tuned"
  # shellcheck disable=SC2046
  CODA_TUNED=$tuned run bench.log 540 python3 -m coda_spec.cli bench --isolated $(staged) \
    --width "${WIDTHS:-2048}" --m 16384 --rounds "${ROUNDS:-10}" --no-kernels \
    --baselines "${BASELINES:-eager,compile,liger}" --out "$out/bench-${MODE:-tuned}"
}
phase_variants_tune() {
  local s tune=() verify=() bench=()
  for s in ${VARIANTS_TUNE:-}; do tune+=(build/stage/$s-[0-9a-f]*); done
  [ ${#tune[@]} -gt 0 ] || mapfile -t tune < <(ROOT=build/stage staged)
  for s in ${VARIANTS_VERIFY:-b2_dgrad_dswiglu rmsnorm_chain f3_norm_swiglu}; do
    verify+=(build/stage/$s-[0-9a-f]*)
  done
  for s in ${VARIANTS_BENCH:-b2_dgrad_dswiglu rmsnorm_chain f3_norm_swiglu f1_residual_rmsnorm}; do
    bench+=(build/stage/$s-[0-9a-f]*)
  done
  run tune.log 200 python3 -m coda_spec.cli tune --isolated "${tune[@]}" --width 2048,4096,8192 \
    --m 16384 --rounds "${ROUNDS:-8}" --out "$out/h200.json"
  run verify.log 150 python3 -m coda_spec.cli verify "${verify[@]}" --seed 20261201
  CODA_TUNED="$out/h200.json" run bench.log 150 python3 -m coda_spec.cli bench --isolated \
    "${bench[@]}" --width 2048,4096,8192 --baselines compile,liger --rounds 10 --no-kernels \
    --out "$out/bench"
}
phase_b2_sweep() {
  run bench.log 330 python3 -m coda_spec.cli bench --isolated build/sweep/b2_dgrad_dswiglu-[0-9a-f]* \
    --width 2048,4096,8192 --baselines compile,liger --rounds "${ROUNDS:-10}" --out "$out/sweep"
  nsight b2 150 b2_dgrad_dswiglu:4096
}
phase_b2_epilogue() {
  local b2
  b2=$(ls -d "${ROOT:-build/explore}"/b2_dgrad_dswiglu-[0-9a-f]* | head -1)
  run tune.log 240 python3 -m coda_spec.cli tune --isolated "$b2" --width 2048,4096,8192 \
    --m 16384 --rounds "${ROUNDS:-30}" --out "$out/h200.json"
  run verify.log 200 python3 -m coda_spec.cli verify "$b2" --seed 20261201
  CODA_TUNED="$out/h200.json" run bench.log 150 python3 -m coda_spec.cli bench --isolated "$b2" \
    --width 2048,4096,8192 --baselines compile,liger --rounds 15 --out "$out/bench"
  [ -z "${NCU_VARIANTS:-}" ] || CODA_BUILD_ROOT=${ROOT:-build/explore} \
    CODA_VARIANTS="$NCU_VARIANTS" nsight b2 200 b2_dgrad_dswiglu:4096
}
phase_families() {  # issue 35: the families' GPU parity, their chains verified, their steps
  local shapes=${FAMILY_SHAPES:-qwen2-1.5b-2x4096,qwen3-1.7b-2x4096,gemma3-1b-2x4096,olmo2-1b-2x4096}
  [ "${PARITY:-1}" = 0 ] || run parity.log "${PARITY_S:-150}" python3 benchmarks/family_parity.py \
    --shapes "${PARITY_SHAPES:-$shapes}" --layers 2 --out "$out/parity.json"
  # shellcheck disable=SC2046,SC2086
  run verify.log "${VERIFY_S:-150}" python3 -u -m coda_spec.cli verify \
    ${FAMILY_BUILDS:-$(ls -d build/{qwen2,qwen3,gemma3,olmo2}_*-latest 2>/dev/null)} \
    --seed "${SEED:-20261204}" --junit "$out/verify.junit.xml" ${VERIFY_ARGS:-}
  local s
  s=$(left 560)
  run step-families.log "$s" python3 benchmarks/train_step.py --shapes "$shapes" \
    --modes "${FAMILY_MODES:-coda,liger,hf,hf-compile-nomask}" --kind fwdbwd --profile \
    --steps "${STEPS:-10}" --warmup "${WARMUP:-2}" --timeout "${MODE_S:-100}" --budget-s "$((s - 10))" \
    --out "$out/step-families.json"
}
phase_reasons() {
  # shellcheck disable=SC2086
  nsight reasons 300 ${NCU_TARGETS:-b2_dgrad_dswiglu:4096 b2_dgrad_dswiglu:8192 \
    f1_residual_rmsnorm:2048 f7_qk_norm_rope:2048 f4_norm_rope:2048}
  # shellcheck disable=SC2086
  run prof.txt 200 python3 benchmarks/profile_reasons.py prof ${PROF_TARGETS:-b3_rope_bwd:4096 \
    b4_ce_fwd_bwd:4096 llama_block:4096}
}

# -- the run ---------------------------------------------------------------------------------
first=0
for p in "$@"; do
  t0=$(date +%s)
  device_status=0
  case " $OWN_RESULTS " in
  *" $p "*) "phase_${p//-/_}" ;;  # the script packs its own results
  *)
    results "$p"  # $out = /tmp/coda-$p/$p, date.txt, gpu.txt, packed as $OUT/$p.tar.gz
    "phase_${p//-/_}"
    echo "exit $device_status" > "$out/exit.txt"
    pack
    ;;
  esac
  echo "== $p: exit $device_status ($(($(date +%s) - t0)) s)"
  [ "$first" -ne 0 ] || first=$device_status
done
device_status=$first
finish  # exit with the first failure's status (benchmarks/device_status.sh)
