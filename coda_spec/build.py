"""``coda build``: spec -> content-addressed build directory with a loadable sm_90a library.

Stages (Triton-style, each a function from one typed value to the next): the one stage table,
``coda_spec.stages.STAGES``, names them, says what each produces and which files it keeps;
``--stop-after`` cuts the chain there and every intermediate so far stays in the build
directory::

    load -> validate -> normalize -> analyze      (coda_spec.check.frontend; no torch, no quack)
    lower     kernel.py + lowered.json            (coda_spec.lower; text only)
              kernels/<step>.py                   (host steps and finalizes as Triton kernels)
    compile   one .o per kernel + .compiled.json  (worker processes: coda_spec.lower.quack_adapter)
              kernels/<step>.cubin                (Triton, sm_90a, in this process)
    link      <name>.so                           (gcc, against libcute_dsl_runtime + libtvm_ffi)
    manifest  manifest.json                       (coda_spec.artifact.manifest; marks it complete)

Layout: ``build/<name>-<hash>/`` where the hash covers the spec's content, the config, the
tool versions and coda's compile-time code (:func:`build_hash`); ``build/<name>-latest`` is a
symlink to the newest complete build of that spec.
Atomicity: a build happens in ``build/.tmp-<name>-<hash>-<pid>/`` and is renamed into place only
when complete (``manifest.json`` written last), so a killed build never looks complete and two
concurrent builds of one spec cannot corrupt each other (the loser discards its copy). A rebuild
of an unchanged spec is a cache hit that imports neither torch nor quack.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from coda_spec import artifact, stages
from coda_spec.artifact import builddir
from coda_spec.artifact.manifest import (
    compiler_lib_dirs,
    finalize_data,
    lowered_exprs,
    make_manifest,
)
from coda_spec.check.frontend import run_stages
from coda_spec.config import DEFAULT, BuildConfig, config_text, parse_config
from coda_spec.errors import Diagnostic, SpecError, ToolError
from coda_spec.finalize import partial_fold
from coda_spec.ir import to_data
from coda_spec.lower import triton_aot
from coda_spec.lower.digest import compile_code
from coda_spec.lower.finalize_kernel import finalize_kernel
from coda_spec.lower.host_kernel import host_kernel
from coda_spec.lower.module import ACCUMULATE_SUFFIX, accumulating, lower_variants
from coda_spec.lower.sass import spills
from coda_spec.primitives import cache_keys
from coda_spec.versions import tool_versions

MAX_WORKERS = 2  # each compile worker peaks at ~750 MB
# What the compile workers import: module -> the distribution of the [build] extra providing it.
BUILD_MODULES = (("quack", "quack-kernels"), ("cutlass", "nvidia-cutlass-dsl"))
AOT_MODULES = (("triton", "triton"),)  # what compiles host steps and finalizes


@dataclass(frozen=True)
class BuildOptions:
    out: Path = Path("build")
    config: BuildConfig = DEFAULT
    stop_after: str = stages.NAMES[-1]  # a stage of coda_spec.stages; the last = complete
    jobs: int = MAX_WORKERS
    force: bool = False
    configs: tuple = ()  # candidate configs (first = fallback); () = just ``config``
    explicit: bool = False  # config/configs came from --config: they override the spec's own

    def for_spec(self, spec) -> BuildOptions:
        """These options with the spec's ``configs:`` as the candidates, unless ``--config``
        was given (``explicit``) or the spec lists none."""
        if self.explicit or not spec.configs:
            return self
        configs = tuple(parse_config(t) for t in spec.configs)
        return replace(self, config=configs[0], configs=configs if len(configs) > 1 else ())

    @property
    def candidates(self) -> tuple:
        return self.configs or (self.config,)


@dataclass(frozen=True)
class BuildResult:
    name: str
    directory: Path
    cached: bool
    complete: bool
    seconds: float


def build_hash(checked, config, lowered, aot=(), accumulate=()) -> str:
    """Content address: the spec, the generated source (a change in coda's lowering is a new
    build; ``aot``: the Triton kernels of host steps and finalizes; ``accumulate``: the steps
    compiled with an accumulating flavour too), the config (or the candidate list), the tool
    versions, the artifact format, the ``cache_key()`` of every primitive the spec uses
    (bumping a primitive's ``version`` rebuilds the specs using it) and the code of coda's own
    that compiles the kernels (``coda_spec.lower.digest``: a change there is a new build, never
    a cache hit on objects the old code compiled)."""

    configs = config if isinstance(config, tuple) else (config,)
    key = configs[0].key() if len(configs) == 1 else [c.key() for c in configs]
    # the generated code names the spec file as it was given (specs/x.yaml, /abs/specs/x.yaml):
    # hashed under its file name alone, so the same spec builds to the same address from any
    # working directory (a tune table, the shipped one too, is keyed by that address)
    file = checked.spec.file
    name = Path(file).name

    def neutral(text: str) -> str:
        return text.replace(file, name) if file else text

    blob = json.dumps(
        {
            "spec": checked.spec.digest,
            "config": key,
            "kernel.py": neutral(lowered.source),
            "kernels": [neutral(k.source) for k in aot],
            "accumulate": sorted(accumulate),
            "tools": tool_versions(),
            "format": artifact.FORMAT_VERSION,
            "primitives": cache_keys(checked.spec),
            "code": compile_code(lowered.source, tuple(k.source for k in aot)),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _say(msg: str, log=None):
    print(msg, flush=True)
    if log is not None:
        log.write(msg + "\n")


def build_spec(path, opts: BuildOptions) -> BuildResult:
    """Build one spec file. Raises SpecError (invalid / unsupported) or ToolError."""

    start = time.perf_counter()
    checked = run_stages(path, opts.stop_after)
    if not stages.reaches(opts.stop_after, "lower"):
        done = stages.stage(opts.stop_after)
        print(
            f"{path}: stopped after {done.name} ({done.produces}; nothing written: the build "
            "directory is made at lower)"
        )
        return BuildResult(Path(path).stem, Path(), False, False, time.perf_counter() - start)
    name = checked.spec.name
    opts = opts.for_spec(checked.spec)
    problems = [p for c in opts.candidates for p in c.problems()]
    if problems:
        raise SpecError([Diagnostic(str(path), 0, 0, "--config", p) for p in problems])

    # pure text, fast: part of the content address
    lowered, variants, dropped = lower_variants(checked, opts.candidates)
    meta = lowered_json(checked, lowered, opts.candidates, variants)
    aot = aot_kernels(checked, meta)
    digest = build_hash(checked, opts.candidates, lowered, aot, meta["accumulate"])
    final = opts.out / builddir.build_name(name, digest)
    if not opts.force and (final / artifact.MANIFEST).is_file():
        builddir.point_latest(opts.out, name, final)
        elapsed = time.perf_counter() - start
        print(f"{path}: cache hit: {final} ({elapsed:.2f}s)")
        return BuildResult(name, final, True, True, elapsed)
    if stages.reaches(opts.stop_after, "compile"):
        # before any "compiling" line: fail with how to install
        require_build_extra(BUILD_MODULES * bool(lowered.kernels) + AOT_MODULES * bool(aot))
    opts.out.mkdir(parents=True, exist_ok=True)
    tmp = builddir.tmp_dir(final)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        with open(tmp / "build.log", "w") as log:
            for step, cfg, why in dropped:
                what = f"kernel '{step}': candidate {config_text(cfg.key())}"
                _say(f"{path}: {what} dropped: {why}", log)
            complete = _run_stages(path, checked, (lowered, meta, aot), variants, tmp, opts, log)
        builddir.publish(tmp, final, replace=opts.force)
    except (SpecError, ToolError):
        failed = opts.out / builddir.failed_name(tmp)  # keep the full logs of a failed build
        shutil.rmtree(failed, ignore_errors=True)
        os.rename(tmp, failed)
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if complete:
        builddir.point_latest(opts.out, name, final)
    elapsed = time.perf_counter() - start
    done = stages.stage(opts.stop_after)
    what = "built" if complete else f"stopped after {done.name} ({done.produces})"
    print(f"{path}: {what}: {final} ({elapsed:.1f}s)")
    return BuildResult(name, final, False, complete, elapsed)


def require_build_extra(modules=BUILD_MODULES + AOT_MODULES) -> None:
    """Raise ToolError naming the missing packages when the [build] extra is not installed.

    Looked up with ``importlib.util.find_spec`` (nothing is imported): the compile workers are
    what import quack and cutlass (GEMM kernels), this process imports triton (host steps and
    finalizes), and without them nothing can be written.
    """
    missing = []
    for module, dist in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or half-installed package
            found = False
        if not found:
            missing.append(f"{dist} (module '{module}')")
    if missing:
        raise ToolError(
            "the [build] extra, needed to compile kernels, is not installed: missing "
            + ", ".join(missing)
            + '; install it with: pip install "coda-spec[build]" '
            '(from a checkout: pip install -e ".[build]"). '
            "--stop-after lower builds without it"
        )


def _run_stages(path, checked, lowering, variants, tmp: Path, opts, log) -> bool:
    lowered, meta, aot = lowering
    (tmp / "spec.yaml").write_text(checked.source.text)
    (tmp / "spec.normalized.json").write_text(json.dumps(to_data(checked.spec), indent=1) + "\n")
    if lowered.kernels:  # host steps only: no GEMM kernel, no kernel.py, nothing to compile
        (tmp / "kernel.py").write_text(lowered.source)
    (tmp / "lowered.json").write_text(json.dumps(lowered_exprs(meta), indent=1) + "\n")
    for k in aot:
        (tmp / triton_aot.KERNEL_DIR).mkdir(exist_ok=True)
        (tmp / triton_aot.KERNEL_DIR / f"{k.step}.py").write_text(k.source)
    n = sum(len(v) for v in variants.values())
    if lowered.kernels:
        more = f", {len(meta['accumulate'])} accumulating" if meta["accumulate"] else ""
        what = f"{len(lowered.kernels)} kernel(s), {n} variant(s){more}"
        _say(f"{path}: lowered {what} -> kernel.py", log)
    if aot:
        names = ", ".join(k.step for k in aot)
        _say(f"{path}: lowered {len(aot)} Triton kernel(s) -> kernels/ ({names})", log)
    if not stages.reaches(opts.stop_after, "compile"):
        return False
    accumulate = [a["symbol"] for a in meta["accumulate"].values()]
    symbols = [v.symbol for vs in variants.values() for v in vs] + accumulate
    records = compile_kernels(path, checked, tmp, symbols, opts, log)
    keep = {vs[0].symbol for vs in variants.values()} | set(accumulate)
    records = _drop_spilling(path, tmp, records, keep, log)
    _note_starved(path, records, log)
    launches = compile_aot(path, aot, tmp, log)
    if not stages.reaches(opts.stop_after, "link"):
        return False
    so = link(tmp, checked.spec.name, [r["symbol"] for r in records], log) if records else None
    if not stages.reaches(opts.stop_after, "manifest"):
        return False
    manifest = make_manifest(checked, meta, records, so, launches)
    artifact.write_manifest(tmp, manifest)
    return True


def aot_kernels(checked, meta: dict) -> list:
    """Every host step, and every finalize a host kernel does not fold, as a Triton kernel
    (text; part of the content address). A finalize reads the partial buffer of the kernel step
    that wrote it, as the fallback variant lays it out (the tile count is a launch argument)."""

    spec = checked.spec
    out, folded, written = [], set(), {}
    for s in spec.all_steps():
        if s.kind == "host":
            k = host_kernel(checked, s)
            out.append(k)
            folded.update(k.folds)
            written.update((o["tensor"], o) for o in k.outputs)
    fields = {f["tensor"]: f for k in meta["kernels"] for f in k["fields"]}
    for s in spec.all_steps():
        if s.kind != "finalize" or s.name in folded:
            continue
        data = finalize_data(s, checked.analysis)
        f = fields.get(s.of)
        part = checked.analysis.tensor(s.of).partial
        if f is None and part.kind == "colpart":  # a host reduce_col's (rows, W) per-row terms
            role, fold, shape = "rowred", partial_fold(part.reduce), written[s.of]["shape"]
        elif f is None:  # a host step's row partial: complete per row
            role, fold, shape = "exact", None, meta["tensors"][s.of]["shape"]
        else:
            role, fold, shape = f["role"], f["fold"], f["shape"]
        out.append(finalize_kernel(data, role, fold, shape, spec_file=spec.file))
    return out


def compile_aot(path, aot: list, tmp: Path, log) -> dict:
    """Compile the Triton kernels (sm_90a cubins, in this process): {step: launch entry}."""
    if not aot:
        return {}
    _say(f"{path}: compiling {', '.join(k.step for k in aot)} (Triton, sm_90a)", log)
    out = {}
    for k in aot:
        start = time.perf_counter()
        try:
            out[k.step] = triton_aot.compile_kernel(k, tmp)
        except triton_aot.TritonCompileError as e:
            raise ToolError(f"{path}: {e} (a coda bug; please report)") from e
        out[k.step]["compile_s"] = round(time.perf_counter() - start, 2)
        _say(f"{path}: compiled {k.step} in {out[k.step]['compile_s']}s", log)
    return out


def _drop_spilling(path, tmp: Path, records: list, first: set, log) -> list:
    """Drop the variants whose SASS spills (STL/LDL); a spilling fallback or accumulating
    kernel (``first``) is kept, with a warning (it is the only one of its kind every call can
    use)."""

    kept = []
    for r in records:
        n = spills(tmp / f"{r['symbol']}.o", tmp)
        r["spills"] = n
        if n is None and len(records) > len(first):
            _say(f"{path}: spill check skipped for {r['symbol']}: no nvdisasm (triton)", log)
        if n and r["symbol"] not in first:
            _say(f"{path}: {r['symbol']} dropped: its SASS spills ({n} STL/LDL)", log)
            continue
        if n:
            _say(f"{path}: warning: fallback {r['symbol']} spills ({n} STL/LDL)", log)
        kept.append(r)
    return kept


# Below this many mainloop (A/B) stages a TMA load's latency is not hidden behind the WGMMAs of
# the stages ahead: b2's default kernel had 2 and spent 78% of its stall samples waiting for
# operands (docs/benchmarks.md, "b2's epilogue stages").
MIN_AB_STAGES = 3


def _note_starved(path, records: list, log) -> None:
    """A note for each compiled kernel whose epilogue leaves the mainloop fewer than
    ``MIN_AB_STAGES`` A/B stages (QuACK's smem split, ``stages`` in SYMBOL.compiled.json)."""
    for r in records:
        st = r.get("stages") or {}
        if st.get("ab") is not None and st["ab"] < MIN_AB_STAGES:
            tile = "x".join(str(x) for x in st.get("epi_tile", ()))
            _say(
                f"{path}: note: {r['symbol']}: its epilogue leaves the mainloop {st['ab']} A/B "
                f"stage(s) (C {st['c']}, D {st['epi']} at a {tile} subtile); a candidate with "
                "epi=16 or cstages=2 gets 3 (docs/build.md, Epilogue knobs), and coda tune can "
                "pick it",
                log,
            )


def lowered_json(checked, lowered, configs, variants: dict | None = None) -> dict:
    """lowered.json: the fallback config's kernels (``kernels``), and every variant: its
    exported symbol, the function of kernel.py it compiles, its config and its fields; and the
    accumulating flavour of each weight-gradient kernel (``accumulate``,
    ``coda_spec.lower.module.accumulating``)."""
    a = checked.analysis
    accumulate = accumulating(checked, lowered.kernels)
    configs = configs if isinstance(configs, tuple) else (configs,)
    out = {
        "spec": checked.spec.name,
        "digest": checked.spec.digest,
        "spec_file": checked.spec.file,  # the build's origin (builddir.origin)
        "config": configs[0].key(),
        "configs": [c.key() for c in configs],
        "sizes": {d.name: d.size for d in checked.spec.dims if d.size is not None},
        "tensors": {t.name: {"shape": list(t.shape), "dtype": t.dtype} for t in a.tensors},
        "kernels": [_kernel_data(k) for k in lowered.kernels],
        "accumulate": {  # step -> its accumulating flavour (the fallback config, D += result)
            k.step: {
                "symbol": k.symbol + ACCUMULATE_SUFFIX,
                "function": k.symbol,
                "gradient": grad,
                "config": configs[0].key(),
                "fields": _kernel_data(k)["fields"],
            }
            for k in lowered.kernels
            if (grad := accumulate.get(k.step)) is not None
        },
    }
    if variants is not None:
        out["variants"] = {
            step: [
                {
                    "config": v.config.key(),
                    "symbol": v.symbol,
                    "function": v.function,
                    "fields": _kernel_data(v.kernel)["fields"],
                }
                for v in vs
            ]
            for step, vs in variants.items()
        }
    return out


def _kernel_data(k) -> dict:
    d = asdict(k)
    d.pop("body")
    d.pop("decorator")
    d.pop("globals")
    d.pop("imports")
    return d


def compile_kernels(path, checked, tmp: Path, symbols, opts: BuildOptions, log) -> list[dict]:
    """Compile every kernel in at most ``opts.jobs`` worker processes (batches share imports)."""
    if not symbols:
        return []
    jobs = max(1, min(opts.jobs, len(symbols)))
    batches = [symbols[i::jobs] for i in range(jobs)]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]
        ),
    )
    procs = []
    try:
        for batch in batches:
            c = opts.candidates[0]
            which = (
                f"{c.tile_m}x{c.tile_n}, cluster {c.cluster_m}x{c.cluster_n}"
                if len(opts.candidates) == 1
                else "each variant at its config"
            )
            _say(f"{path}: compiling {', '.join(batch)} (sm_90a, {which})", log)
            cmd = [sys.executable, "-m", "coda_spec.lower.quack_adapter", str(tmp), *batch]
            procs.append(
                subprocess.Popen(
                    cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
                )
            )
        for p in procs:
            out, _ = p.communicate()
            log.write(out)
            for line in out.splitlines():
                if line.startswith(("compiled ", "FAILED ")):
                    _say(f"{path}: {line}", log)
    except BaseException:  # a Ctrl-C: no worker outlives the build (its directory goes)
        for p in procs:
            p.kill()
            p.wait()
        raise
    failed = [s for s in symbols if (tmp / f"{s}.error.txt").exists()]
    if failed:
        raise SpecError([_compile_diag(checked, tmp, s, opts.out) for s in failed])
    missing = [s for s in symbols if not (tmp / f"{s}.compiled.json").exists()]
    if missing:
        # build_spec renames the build directory to <dir>.failed: point at the log's final place.
        log_path = tmp.parent / builddir.failed_name(tmp) / "build.log"
        raise ToolError(f"compile workers exited without output for {missing}; see {log_path}")
    return [json.loads((tmp / f"{s}.compiled.json").read_text()) for s in symbols]


def _compile_diag(checked, tmp: Path, symbol: str, out: Path) -> Diagnostic:
    """Map a compile failure to the kernel (and, when the traceback names a generated line,
    to the spec line whose comment sits above it)."""
    tb = (tmp / f"{symbol}.error.txt").read_text()
    last = [ln for ln in tb.strip().splitlines() if ln.strip()][-1][:400]
    # the fallback's symbol, a variant's (``__<config tag>``) or the accumulating flavour's
    step = max(
        (s for s in _kernels(checked) if f"{symbol}__".startswith(f"coda_{s.name}__")),
        key=lambda s: len(s.name),
    )
    line, col = step.loc.line, step.loc.col
    gen = (tmp / "kernel.py").read_text().splitlines()
    for ln in reversed(tb.splitlines()):
        if 'kernel.py", line ' in ln:
            n = int(ln.split('kernel.py", line ')[1].split(",")[0])
            for back in range(n - 1, 0, -1):
                text = gen[back - 1].strip()
                if text.startswith("# ") and ".yaml:" in text:
                    line = int(text.split(".yaml:")[1].split(":")[0])
                    break
            break
    return Diagnostic(
        checked.spec.file,
        line,
        col,
        step.name,
        f"CuTe DSL/QuACK could not compile kernel '{step.name}': {last}",
        f"full log: {out / builddir.failed_name(tmp)}/{symbol}.error.txt",
    )


def _kernels(checked):
    spec = checked.spec
    return [s for s in spec.all_steps() if s.kind == "kernel"]


def link(tmp: Path, name: str, symbols, log) -> str:
    libdirs = compiler_lib_dirs()
    so = f"{name}.so"
    cmd = ["gcc", "-shared", "-o", str(tmp / so), *[str(tmp / f"{s}.o") for s in symbols]]
    for d, lib in libdirs:
        cmd += [f"-L{d}", f"-l{lib}"]
    cmd += ["-Wl,-rpath,$ORIGIN"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    log.write(" ".join(cmd) + "\n" + res.stdout + res.stderr)
    if res.returncode != 0:
        raise ToolError(f"link failed: {res.stderr.strip()[:500]}")
    _say(f"linked {so} ({(tmp / so).stat().st_size // 1024} KiB)", log)
    return so
