"""``coda bench``: time built chains against cuBLAS speed of light and unfused baselines.

Like verify, bench never compiles coda kernels: it loads a build (``coda_spec.runtime``) and runs
it at the asked dims (re-sized by ``coda_spec.ops.resized``).

Per chain and per shape (``--m`` for the dynamic dim, ``--dims`` / ``--width`` for static ones):

1. **Dims.** A static dim other than the build's re-sizes the manifest without a rebuild, as
   verify's ragged case does (the kernels are shape-symbolic); dims the spec's shape rules
   refuse give a message naming the rebuild. ``--width W`` applies the catalogue width rule:
   D = W, F = round_up(8/3·W, 256), KV = (W/512)·head_dim, head_dim and V unchanged -- each only
   where the spec has the dim.
2. **Inputs** are drawn on the device with ``coda_spec.prove.inputs`` (never zeros; derived inputs
   such as b4's lse are computed from the others), the same tensors for every candidate.
3. **Candidates**, per direction (``fwd``; with a ``backward:`` section also ``bwd`` and
   ``fwd+bwd``): coda's whole chain through the runtime (kernels, finalizes, host steps,
   validation included: what a user's call costs); ``sol``: the section's GEMMs through
   ``torch.mm`` on the same operand views; ``eager`` / ``compile`` / ``liger`` from
   ``coda_spec.bench.baselines``; and each coda kernel alone next to its own ``torch.mm``.
   Backward baselines are autograd of the baseline forward (``torch.autograd.grad`` with the
   spec's incoming gradients; ``bwd`` replays it on a retained graph).
4. **Agreement.** Before timing, every output the eager baseline produces is compared with
   coda's (relative error, reported in the case notes): a baseline that computes something else
   is not a baseline; nor is a coda kernel run at dims it cannot take.
5. **Timing** (``coda_spec.bench.timing``): warm-up, then interleaved rounds of every candidate
   of the shape, by the run's ruler: ``sustained`` (the default; each sample a stream of
   ``sustain_s`` seconds of back-to-back calls at the power cap, with the SM clock and board
   power sampled) or ``isolated`` (each sample one call after an L2 flush).

The device's peaks are measured once per run (a large bf16 ``torch.mm``, a large copy), by the
run's ruler, and recorded with the results (so percent of peak compares like with like: at the
cap against the mm at the cap); SoL for steps without a GEMM uses the measured copy bandwidth.
"""

from __future__ import annotations

import datetime
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from coda_spec.bench import baselines as B
from coda_spec.bench import roofline as R
from coda_spec.bench.model import CODA, BenchRun, Case, Device, KernelTimed, Stats, Timed
from coda_spec.bench.timing import (
    ISOLATED,
    SUSTAIN_S,
    SUSTAINED,
    SUSTAINED_ROUNDS,
    Clock,
    CudaClock,
    NullSampler,
    Sampler,
    open_sampler,
    time_with,
)
from coda_spec.dims import dynamic_dim
from coda_spec.dtypes import DTYPES
from coda_spec.errors import ToolError
from coda_spec.ops import ResizeRefused, resized
from coda_spec.prove.inputs import make_grads, make_inputs

DEFAULT_M = (16384,)
BASELINE_NAMES = ("eager", "compile", "liger")
COMPARE_RTOL = 2e-2  # coda vs the eager baseline: both bf16 pipelines, a few roundings apart


def compare_rtol(stored) -> float:
    """The agreement bound for one coda output of torch dtype ``stored``: COMPARE_RTOL, or for
    an fp8 output, whose one rounding is itself up to 2^-(mantissa bits + 1) relative (6% for
    e4m3) while an ``equivalent_to`` baseline may state the value unrounded, twice that."""
    for d in DTYPES:
        if d.kind == "fp8" and getattr(torch, d.torch_name) == stored:
            return max(COMPARE_RTOL, 2.0**-d.mantissa_bits)
    return COMPARE_RTOL


@dataclass(frozen=True)
class Options:
    ms: tuple = DEFAULT_M
    dims: dict = field(default_factory=dict)  # explicit static dims (--dims)
    widths: tuple = ()  # catalogue width rule (--width); () = the build's own dims
    baselines: tuple = BASELINE_NAMES
    rounds: int = SUSTAINED_ROUNDS
    warmup: int = 2
    seed: int = 0
    kernels: bool = True  # also time each coda kernel alone
    device: str = "cuda"  # where inputs are drawn (CPU tests run the driver on a fake chain)
    ruler: str = SUSTAINED  # or ISOLATED (coda_spec.bench.timing)
    sustain_s: float = SUSTAIN_S  # seconds per stream (sustained ruler)

    def __post_init__(self):
        if self.ruler not in (SUSTAINED, ISOLATED):
            raise ValueError(f"ruler {self.ruler!r}: expected {SUSTAINED!r} or {ISOLATED!r}")
        if not (isinstance(self.sustain_s, (int, float)) and self.sustain_s > 0):
            raise ValueError(
                f"--sustain-s {self.sustain_s!r}: must be a positive number of seconds"
            )

    def time(self, candidates: dict, clock: Clock, sampler: Sampler | None, progress=None):
        """The candidates timed by this ruler (``timing.time_with``)."""
        return time_with(
            self.ruler,
            candidates,
            clock,
            sampler,
            self.rounds,
            self.warmup,
            self.sustain_s,
            progress,
        )


# -- dims ----------------------------------------------------------------------------------------
def round_up(x: float, to: int) -> int:
    return int(math.ceil(x / to) * to)


def width_dims(spec, width: int) -> dict:
    """The catalogue width rule, for the dims ``spec`` has."""
    have = {d.name: d.size for d in spec.dims if d.size is not None}
    out = {}
    if "D" in have:
        out["D"] = width
    if "F" in have:
        out["F"] = round_up(8 * width / 3, 256)
    if "KV" in have:
        out["KV"] = (width // 512) * have.get("head_dim", 128)
    return out


def shapes(spec, opts: Options) -> list[dict]:
    """Every dims binding to run ``spec`` at: widths x M values, static dims overridden."""
    have = {d.name for d in spec.dims if d.size is not None}
    dynamic = dynamic_dim(spec.dims)
    static = {k: v for k, v in opts.dims.items() if k in have}
    widths = [width_dims(spec, w) for w in opts.widths] or [{}]
    every = {d.name: d.size for d in spec.dims}
    out = []
    for w in widths:
        for m in opts.ms:
            out.append({**every, **w, **static, **({dynamic: m} if dynamic else {})})
    return out


def at_dims(chain, checked, sizes: dict):
    """(chain, checked) re-sized to ``sizes``' static dims without a rebuild
    (``coda_spec.ops.resized``, the one re-size recipe, with its baked-constant check), or
    ToolError naming the rebuild."""

    declared = checked.spec.dim_sizes()
    static = {k: v for k, v in sizes.items() if declared.get(k) is not None and declared[k] != v}
    if not static:
        return chain, checked
    try:
        chain = resized(chain, static, checked)
    except ResizeRefused as e:
        raise ToolError(
            f"{checked.spec.name}: this build cannot run at {static}: {e.reason}; {e.fix}"
        ) from e
    return chain, chain.checked()


# -- device --------------------------------------------------------------------------------------
def device_info(peak_tflops: float, copy_gbps: float) -> Device:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    driver = ""
    if shutil.which("nvidia-smi"):
        try:
            driver = (
                subprocess.run(
                    ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
                .stdout.split("\n")[0]
                .strip()
            )
        except (OSError, subprocess.SubprocessError):
            driver = ""
    return Device(
        name=props.name,
        capability=f"sm_{props.major}{props.minor}",
        driver=driver,
        torch=torch.__version__,
        cuda=str(torch.version.cuda),
        sms=props.multi_processor_count,
        peak_tflops=peak_tflops,
        copy_gbps=copy_gbps,
    )


def measure_peaks(
    clock: Clock, rounds: int = 10, opts: Options | None = None, sampler: Sampler | None = None
) -> tuple[float, float, dict]:
    """(bf16 mm TFLOP/s, copy GB/s) measured here: an 8192^3 torch.mm, a 1 GiB copy; by
    ``opts``' ruler (isolated by default; sustained: 2 rounds of streams)."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    src = torch.randn(256 * 1024 * 1024, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    ruler = Options(ruler=ISOLATED, rounds=rounds, warmup=3)
    if opts is not None and opts.ruler == SUSTAINED:
        ruler = Options(rounds=2, warmup=3, sustain_s=opts.sustain_s)
    cands = {"mm": lambda: torch.mm(a, b), "copy": lambda: dst.copy_(src)}
    stats, _, _ = ruler.time(cands, clock, sampler)
    tflops = 2 * n**3 / stats["mm"].median_ms / 1e9
    gbps = 2 * src.numel() * src.element_size() / stats["copy"].median_ms / 1e6
    return tflops, gbps, stats


# -- candidates ----------------------------------------------------------------------------------
def _operands(step, env: dict):
    a, b = env[step.a.tensor], env[step.b.tensor]
    return (a.T if step.a.transposed else a), (b.T if step.b.transposed else b)


def gemms_fn(manifest, steps: list, env: dict) -> Callable[[], object] | None:
    """The section's GEMMs through cuBLAS on coda's own operand tensors (None: no GEMM)."""
    pairs = [_operands(s, env) for s in steps if s.kind == "kernel"]
    if not pairs:
        return None
    return lambda: [torch.mm(a, b) for a, b in pairs]


def _grad_map(checked) -> tuple[dict, dict]:
    """(incoming: grad name -> output it is the gradient of, produced: grad -> input)."""
    bwd = checked.spec.backward
    produced = {o.name for o in bwd.outputs}
    incoming = {g: t for g, t in bwd.grads if g not in produced}
    made = {g: t for g, t in bwd.grads if g in produced}
    return incoming, made


def _mark_dynamic(checked, args: dict) -> None:
    """Tell torch.compile which axes are the spec's dynamic dims (M): one graph serves every M
    at these static dims, and the static dims stay static (what a training job sees)."""
    dynamic = {dynamic_dim(checked.spec.dims)} - {None}
    for t in checked.spec.tensors:
        x = args.get(t.name)
        if isinstance(x, torch.Tensor):
            for axis, d in enumerate(t.shape):
                if d in dynamic and x.dim() > axis:
                    torch._dynamo.maybe_mark_dynamic(x, axis)


def baseline_fns(base, checked, inputs: dict, grads: dict | None, compiled=None) -> dict:
    """{direction: callable} for one baseline (``compiled``: its fn through torch.compile)."""
    fn = compiled or base.fn
    args = base.prepare(dict(inputs)) if base.prepare else dict(inputs)
    if compiled is not None:
        _mark_dynamic(checked, args)
    out = {"fwd": lambda: fn(args)}
    if grads is None or checked.spec.backward is None:
        return out
    incoming, made = _grad_map(checked)
    wrt_names = [t for t in made.values() if t in args]
    outs_for = dict(incoming)

    def forward_graph():
        leaves = {
            k: (v.detach().requires_grad_(True) if k in wrt_names else v) for k, v in args.items()
        }
        res = fn(leaves)
        ys = [res[t] for t in outs_for.values()]
        gs = [grads[g] for g in outs_for]
        return ys, gs, [leaves[n] for n in wrt_names]

    def fwd_bwd():
        ys, gs, xs = forward_graph()
        return torch.autograd.grad(ys, xs, gs, allow_unused=True)

    held = {}

    def bwd():
        if "graph" not in held:
            held["graph"] = forward_graph()
        ys, gs, xs = held["graph"]
        return torch.autograd.grad(ys, xs, gs, retain_graph=True, allow_unused=True)

    out["bwd"] = bwd
    out["fwd+bwd"] = fwd_bwd
    return out


def _compare(pairs: dict, what: str) -> list[str]:
    """One note from {name: (baseline tensor, coda tensor)}: the worst relative error, or every
    output that disagrees (``MISMATCH``: a shape, a non-finite value, rel err past
    :func:`compare_rtol`: 2e-2, or an fp8 output's rounding)."""
    errs, bad = {}, []
    for name, (got, want) in pairs.items():
        rtol = compare_rtol(want.dtype)
        got, want = got.double(), want.double()
        if got.shape != want.shape:
            bad.append(f"'{name}' shape {tuple(got.shape)} != coda {tuple(want.shape)}")
            continue
        finite = torch.isfinite(want) & torch.isfinite(got)
        rel = float((got - want)[finite].norm()) / (float(want[finite].norm()) or 1.0)
        errs[name] = rel
        lost = int((torch.isfinite(want) != torch.isfinite(got)).sum())
        if rel > rtol or lost:
            bad.append(f"'{name}' rel err {rel:.2e}" + (f", {lost} non-finite" if lost else ""))
    if bad:
        return [f"MISMATCH coda vs {what}: " + "; ".join(bad)]
    if not errs:
        return []
    worst = max(errs, key=errs.get)
    return [f"coda = {what} on {len(errs)} output(s), worst rel err {errs[worst]:.1e} ({worst})"]


def _agreement(checked, coda_env: dict, base, inputs: dict) -> list[str]:
    """The eager baseline's forward outputs against coda's."""
    res = base.fn(base.prepare(dict(inputs)) if base.prepare else dict(inputs))
    names = [n for n in base.produces if n in coda_env and n in res]
    return _compare({n: (res[n], coda_env[n]) for n in names}, "eager")


def _agreement_bwd(checked, coda_env: dict, base, inputs: dict, grads: dict) -> list[str]:
    """Autograd of the eager forward against coda's backward outputs."""
    fns = baseline_fns(base, checked, inputs, grads)
    _, made = _grad_map(checked)
    args = base.prepare(dict(inputs)) if base.prepare else dict(inputs)
    wrt = [g for g, t in made.items() if t in args]
    got = fns["fwd+bwd"]()
    pairs = {g: (x, coda_env[g]) for g, x in zip(wrt, got, strict=True) if x is not None}
    return _compare(pairs, "eager autograd")


def _stats_or_none(stats: dict, failed: dict, key: str) -> tuple[Stats | None, str]:
    if key in stats:
        return stats[key], ""
    return None, f"failed: {failed.get(key, 'not run')}"


# -- one chain at one shape ----------------------------------------------------------------------
def draw(chain, checked, sizes: dict, opts: Options) -> tuple[dict, dict, dict | None]:
    """(every spec input, the inputs a call takes, the incoming gradients or None), drawn on
    ``opts.device`` from ``opts.seed`` with ``coda_spec.prove.inputs`` (bench and tune draw
    alike)."""

    low, _ = make_inputs(checked.spec, sizes, opts.seed, device=opts.device)
    inputs = {k: low[k] for k in chain.required_inputs}
    grads = None
    m = chain.manifest
    if m.has_backward:
        grads, _ = make_grads(checked.spec, checked.analysis, sizes, opts.seed + 1, opts.device)
    return low, inputs, grads


def _coda_candidates(chain, env, inputs, grads, sizes, kernels: bool) -> dict:
    """coda's whole chain per direction, the section's cuBLAS GEMMs, each kernel and its GEMM."""
    m = chain.manifest
    cands: dict[str, Callable] = {f"{CODA}:fwd": lambda: chain.run(dict(inputs))}
    if grads:
        cands[f"{CODA}:bwd"] = chain.steps_fn(env, sizes, m.backward_steps)
        cands[f"{CODA}:fwd+bwd"] = lambda: chain.run(dict(inputs), grads=dict(grads))
    for d in ("fwd", "bwd", "fwd+bwd") if grads else ("fwd",):
        fn = gemms_fn(m, R.section_steps(m, d), env)
        if fn is not None:
            cands[f"sol:{d}"] = fn
    for s in R.section_steps(m, "fwd+bwd" if grads else "fwd") if kernels else ():
        if s.kind == "kernel":
            cands[f"kernel:{s.name}"] = chain.steps_fn(env, sizes, [s])
            a, b = _operands(s, env)
            cands[f"kernel-sol:{s.name}"] = lambda a=a, b=b: torch.mm(a, b)
    return cands


def _baseline_candidates(checked, manifest, sizes, opts, low, grads, compiled) -> tuple:
    """({"<baseline>:<direction>": callable}, {baseline: note}, {baseline: produces every
    output}, {baseline name: Baseline})."""

    bases, cands, why, complete = {}, {}, {}, {}
    if "eager" in opts.baselines or "compile" in opts.baselines:
        bases["eager"] = B.eager(checked, sizes)
    if "liger" in opts.baselines:
        lig = B.liger(checked, sizes)
        if lig is not None:
            bases["liger"] = lig
    for name in opts.baselines:
        base = bases.get("eager" if name == "compile" else name)
        if base is None:
            continue
        comp = None
        if name == "compile":  # one compile per chain and static dims; M stays dynamic
            key = (checked.spec.name, tuple(sorted(checked.spec.dim_sizes().items())))
            if key not in compiled:
                compiled[key] = torch.compile(base.fn)
            comp = compiled[key]
        why[name] = base.note
        complete[name] = {o.name for o in manifest.outputs} <= set(base.produces)
        for d, fn in baseline_fns(base, checked, low, grads, comp).items():
            cands[f"{name}:{d}"] = fn
    return cands, why, complete, bases


def _configs_run(chain, steps, sizes) -> str:
    """The config the section's kernels ran at (their selected variants: tuned, else the
    fallback); several are listed per kernel. "" for a section without kernels."""
    picked = chain.selected_variants(sizes)
    names = [s.name for s in steps if s.kind == "kernel"]
    configs = list(dict.fromkeys(picked[n] for n in names))
    if len(configs) <= 1:
        return configs[0] if configs else ""
    return "; ".join(f"{n}: {picked[n]}" for n in names)


def _case(chain, checked, m, sizes, d, opts, timing, notes, copy_gbps) -> Case:
    stats, failed, first, cands, why, complete = timing
    steps = R.section_steps(m, d)
    outs = R.section_outputs(m, d)
    gemm = stats.get(f"sol:{d}")
    timed = []
    for name in (CODA, *opts.baselines):
        key = f"{name}:{d}"
        if name != CODA and key not in cands:
            continue
        st, failure = _stats_or_none(stats, failed, key)
        extra = f"first call {first[key]:.1f} s" if name == "compile" and key in first else ""
        note = "; ".join(x for x in (why.get(name, ""), failure, extra) if x)
        timed.append(Timed(name, st, note, complete.get(name, True)))
    kernels = []
    for s in steps if opts.kernels and d != "fwd+bwd" else ():
        if s.kind != "kernel":
            continue
        kc, failure = _stats_or_none(stats, failed, f"kernel:{s.name}")
        ks, _ = _stats_or_none(stats, failed, f"kernel-sol:{s.name}")
        flops, nbytes = R.gemm_flops(m, s, sizes), R.step_bytes(m, s, sizes)
        kernels.append(KernelTimed(s.name, kc, ks, flops, nbytes, failure))
    return Case(
        chain=checked.spec.name,
        dims=dict(sizes),
        direction=d,
        sol_kind=R.sol_kind(steps),
        flops=float(sum(R.gemm_flops(m, s, sizes) for s in steps if s.kind == "kernel")),
        bytes=float(R.min_bytes(m, steps, outs, sizes)),
        sol_ms=R.sol_ms(m, steps, outs, sizes, gemm.median_ms if gemm else None, copy_gbps),
        candidates=tuple(timed),
        kernels=tuple(kernels),
        sol=gemm,
        notes=tuple(notes),
        config=_configs_run(chain, steps, sizes),
    )


def bench_shape(
    chain,
    checked,
    sizes: dict,
    opts: Options,
    clock: Clock,
    copy_gbps: float,
    compiled: dict,
    progress: Callable[[str], None],
    sampler: Sampler | None = None,
) -> list[Case]:
    """Every candidate of one chain at one shape, timed in the same rounds by ``opts``' ruler
    (``sampler``: the sustained ruler's telemetry; None: none); one Case per direction."""
    chain, checked = at_dims(chain, checked, sizes)
    m = chain.manifest
    low, inputs, grads = draw(chain, checked, sizes, opts)
    # add_to outputs accumulate into an input (or gradient) in place: the run whose outputs the
    # baselines are checked against gets its own copy of those, so the baselines see them fresh
    into = {s.add_to for s in R.section_steps(m, "fwd+bwd") if s.kind == "kernel" and s.add_to}
    fresh = lambda d: {k: (v.clone() if k in into else v) for k, v in d.items()}  # noqa: E731
    env = chain.run(fresh(inputs), grads=fresh(grads) if grads else None)
    clock.resolve([])  # waits for the device
    cands = _coda_candidates(chain, env, inputs, grads, sizes, opts.kernels)
    more, why, complete, bases = _baseline_candidates(checked, m, sizes, opts, low, grads, compiled)
    cands.update(more)
    notes = {"fwd": [], "bwd": []}
    if "eager" in bases:
        notes["fwd"] = _agreement(checked, env, bases["eager"], low)
        if grads:
            notes["bwd"] = _agreement_bwd(checked, env, bases["eager"], low, fresh(grads))
    t0 = time.perf_counter()
    stats, failed, first = opts.time(
        cands,
        clock,
        sampler,
        progress=lambda msg: progress(f"{msg} ({time.perf_counter() - t0:.1f} s)"),
    )
    timing = (stats, failed, first, cands, why, complete)
    return [
        _case(chain, checked, m, sizes, d, opts, timing, notes.get(d, []), copy_gbps)
        for d in (("fwd", "bwd", "fwd+bwd") if grads else ("fwd",))
    ]


def plan(targets: list, opts: Options) -> list[tuple]:
    """Every (chain, checked spec, sizes) to time, in order; refuses ``--dims`` no target has."""
    jobs = []
    for _, chain in targets:
        checked = chain.checked()
        jobs += [(chain, checked, s) for s in shapes(checked.spec, opts)]
    static = {d.name for _, c, _ in jobs for d in c.spec.dims if d.size is not None}
    unknown = sorted(set(opts.dims) - static)
    if unknown:
        raise ValueError(
            f"--dims {', '.join(unknown)}: no target has such a static dim (they have "
            f"{', '.join(sorted(static))}; the dynamic dim is set with --m)"
        )
    return jobs


def run_bench(
    targets: list, opts: Options, command: str, progress: Callable[[str], None] | None = None
) -> BenchRun:
    """``targets``: (build directory, loaded chain) pairs. Needs a CUDA GPU."""

    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    jobs = plan(targets, opts)
    if not torch.cuda.is_available():
        raise ToolError("coda bench needs a CUDA GPU (torch.cuda.is_available() is False)")
    clock = CudaClock()
    sampler = open_sampler(*device_ids()) if opts.ruler == SUSTAINED else NullSampler()
    try:
        return _run_bench(jobs, opts, command, say, clock, sampler)
    finally:
        sampler.close()


def device_ids() -> tuple[int, str]:
    """(index, ``GPU-<uuid>``) of the current device, for the telemetry source."""
    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    text = str(uuid) if uuid is not None else ""
    return index, (text if not text or text.startswith("GPU-") else f"GPU-{text}")


def _run_bench(jobs, opts: Options, command: str, say, clock: Clock, sampler: Sampler) -> BenchRun:
    # torch.compile: dims we mark dynamic (M) are dynamic; any other change (a new width)
    # compiles a new static graph rather than turning D dynamic behind our back
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.cache_size_limit = 64
    ruler = opts.ruler
    if ruler == SUSTAINED:
        ruler += f" ({opts.sustain_s:g} s streams; telemetry: {sampler.source or 'none'})"
    say(f"measuring device peaks (bf16 mm 8192^3, 1 GiB copy), ruler {ruler}")
    tflops, gbps, _ = measure_peaks(clock, opts=opts, sampler=sampler)
    device = device_info(tflops, gbps)
    say(
        f"{device.name} ({device.capability}, driver {device.driver}): "
        f"mm {tflops:.0f} TFLOP/s, copy {gbps:.0f} GB/s"
    )
    cases, notes, compiled = [], [], {}
    for i, (chain, checked, sizes) in enumerate(jobs, 1):
        label = f"[{i}/{len(jobs)}] {checked.spec.name} " + " ".join(
            f"{k}={v}" for k, v in sizes.items()
        )
        say(label)
        try:
            cases += bench_shape(
                chain,
                checked,
                sizes,
                opts,
                clock,
                gbps,
                compiled,
                lambda msg, label=label: say(f"  {label}: {msg}"),
                sampler,
            )
        except (ToolError, RuntimeError, ValueError) as e:
            msg = f"{label}: skipped: {type(e).__name__}: {str(e).splitlines()[0]}"
            say(msg)
            notes.append(msg)
        torch.cuda.empty_cache()  # this shape's tensors are gone; give the next one room
    return BenchRun(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        command=command,
        device=device,
        rounds=opts.rounds,
        cases=tuple(cases),
        flush="none" if opts.ruler == SUSTAINED else "l2",
        notes=tuple(notes),
        ruler=opts.ruler,
        sustain_s=opts.sustain_s if opts.ruler == SUSTAINED else 0.0,
        telemetry=sampler.source,
    )
