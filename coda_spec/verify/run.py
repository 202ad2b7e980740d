"""``coda verify``: prove built kernels right against the spec's reference math.

The protocol is documented for users in docs/verification.md.

Protocol, per chain and per shape case (real: M = 16384 at the spec's dims; ragged: M = 1000 and
static dims nudged off the tile grid; small: M = 64; or ``--dims``):

1. fresh random inputs (``coda_spec.prove.inputs``: never zeros) from a recorded, replayable seed;
2. every buffer a kernel writes (outputs, aux tiles, fp32 partial buffers) is poisoned with NaN
   before the launch; ``add_to`` outputs start from the (random) tensor they accumulate into,
   and a host step's ``store ... over: t`` output is ``t``'s buffer, not poisoned (it holds the
   values the step reads before writing over them);
3. the chain runs through ``coda_spec.runtime``; ref = the spec's math in fp64 and ref_lowp =
   the low-precision pipeline (bf16 matmuls, rounding at every stored tensor), both with
   ``coda_spec.prove.reference`` on the same GPU and the same inputs;
4. per output: every element must be written and finite (slots a primitive leaves untouched by
   design — rows whose index is the tensor's ``ignore_index`` in a gathered output — are
   declared and excluded); ``max|out - ref| <= 2 * max|ref_lowp - ref| + floor`` with
   ``floor = 1e-5 * max|ref|`` for fp32 outputs (statistics that ref_lowp does not round) and 0
   for 16-bit and fp8 ones; no per-spec loosening (an fp8 output's bound is about one fp8
   spacing at the top of its range: ref_lowp rounds and saturates it with ``round_to``, as the
   kernel's store does). Partial buffers must have every slot written.
   The relative error ||out - ref|| / ||ref|| is reported (about 1.7e-3 is one bf16 rounding);
5. ``equivalent_to`` (the unfused math) is evaluated on the same inputs and compared with ref.

Memory: the fp64 references hold every value of the chain at the case's shape (llama3_last's
M x V logits at M = 16384 are 15.7 GiB each in fp64, several of them live at once), so a case
need not fit the GPU at the spec's real M. Each reference keeps only the outputs it is compared
on (its intermediates are freed before the next one runs), and a case that still runs out of GPU
memory is run again at half the dynamic dim (down to the small case's M), noted in the report
with the size it ran at (:func:`fitted_case`). A ``--dims`` case is what the user asked for, so it
is never shrunk: its out-of-memory is a :class:`~coda_spec.errors.ToolError` naming ``--dims``
and ``--small``.

Re-sized cases (ragged, ``--dims``) run the build under its manifest with other ``dims``
(:func:`resized_manifest`): every manifest shape is an expression over the dims (format 6 on), so
nothing is re-lowered; verify imports nothing from ``coda_spec.lower``.

Variants (a kernel compiled at several tile configs, the runtime picking one per shape from a
tune table). Every variant a call could select is checked: the cases run once
per candidate config of the build (``configs``), each round forcing that config's variant on
every kernel step that has it and ``variants[0]`` (the fallback) on the others
(``Chain.with_variants``), so each variant of each kernel runs every case. The ragged case is
ragged for the round's own tile (its ``tile_n``), and re-sized manifests carry each variant's
own partial-buffer shapes. Checks of a multi-variant build are labelled with the round's config
(case ``real [128x128,cluster=2x1,pingpong]``); a single-variant build runs and reads as before.

Exit codes (``coda_spec.errors.EXIT_CODES``): EXIT_OK all pass, EXIT_MISMATCH numeric failure,
EXIT_INVALID_SPEC, EXIT_TOOL_FAILURE, EXIT_NO_GPU (the reference-side checks ran; pass
``--allow-no-gpu`` to accept that). Verify never compiles.
"""

from __future__ import annotations

import gc
import time

import torch

from coda_spec import ops
from coda_spec.check.frontend import with_dims
from coda_spec.config import config_text
from coda_spec.dims import DimError, dynamic_dim, evaluate
from coda_spec.errors import SpecError, ToolError
from coda_spec.prove.equivalence import check_equivalence
from coda_spec.prove.inputs import derive_mismatches, make_grads, make_inputs
from coda_spec.prove.mathcheck import prove
from coda_spec.prove.reference import run
from coda_spec.verify.report import Check, Report

REAL_M, RAGGED_M, SMALL_M = 16384, 1000, 64


class CaseSkipped(Exception):
    """A shape case that cannot run as asked; verify_chain notes why and goes on."""


def ragged_dims(checked, tile_n: int = 256, notes: list | None = None) -> dict:
    """Static dims nudged off the tile grid (still multiples of 8 and valid for the spec).

    A candidate must also keep every ``derive``d input consistent: make_inputs recomputes
    derived inputs from the case's other inputs, but a derive whose shape does not follow the
    dims (``cat([q_norm] * 4 + [k_norm] * 2)`` for a [QKV] weight: a literal head count, or
    inputs sized by other dims) keeps its size, and the runtime would refuse the inputs ("input
    'wn' dim 0 is 768 but QKV is 640 elsewhere"). Such a dim stays on the grid; why is appended
    to ``notes``."""

    dyn = {d.name: RAGGED_M for d in checked.spec.dims if d.size is None}
    derived = any(t.derive is not None for t in checked.spec.tensors)
    out = {}
    for d in checked.spec.dims:
        if d.size is None or d.size < 2 * tile_n or d.size % tile_n:
            continue
        refused = []
        for cand in (d.size - 24, d.size - 128, d.size - 136, d.size - 384):
            try:
                case = with_dims(checked, {**out, d.name: cand})
            except SpecError:
                continue
            if derived:
                bad = derive_mismatches(case.spec, {**case.spec.dim_sizes(), **dyn})
                if bad:
                    refused.append((cand, bad[0]))
                    continue
            out[d.name] = cand
            break
        if d.name not in out and refused and notes is not None:
            cand, why = refused[0]
            notes.append(f"ragged case: {d.name} stays {d.size} (not nudged to {cand}): {why}")
    return out


def cases(
    checked,
    dims: dict | None,
    only_small: bool = False,
    notes: list | None = None,
    tile_n: int = 256,
) -> list[tuple[str, dict]]:
    """The shape cases; ``tile_n``: the tile the ragged case's static dims are nudged off."""

    dyn = dynamic_dim(checked.spec.dims)

    def with_m(m, extra=None):
        return {**({dyn: m} if dyn else {}), **(extra or {})}

    if dims:
        return [("dims", {**with_m(REAL_M), **dims})]
    if only_small:
        return [("small", with_m(SMALL_M))]
    return [
        ("real", with_m(REAL_M)),
        ("ragged", with_m(RAGGED_M, ragged_dims(checked, tile_n, notes=notes))),
        ("small", with_m(SMALL_M)),
    ]


def resized_manifest(chain, checked_case, built=None):
    """The chain's manifest at the re-analysed case's dims, lowering nothing
    (``coda_spec.ops.resized_manifest``, the one re-size recipe): a refused fallback, or a
    constant the build compiled in from dims the case changes, skips the case, noted."""
    try:
        return ops.resized_manifest(chain, checked_case, built)
    except ops.ResizeRefused as e:
        raise CaseSkipped(e.reason) from None


def _untouched(manifest, analysis, out_name, env):
    """Declared untouched slots: rows of a gathered (ColVecSelect) output whose index is
    ignored (its ignore_index, or out of range: the kernel writes only in-range rows)."""

    for step in manifest.kernel_steps():
        f = next((f for f in step.fields if f.tensor == out_name), None)
        if f is None or f.role != "select":
            continue
        index = next(x.tensor for x in step.fields if x.role == "index")
        idx = env[index].long()
        n = _static_value(step.n, manifest.dims)
        bad = idx < 0
        if n is not None:
            bad |= idx >= n
        return bad
    return torch.zeros((), dtype=torch.bool)


def _static_value(expr, dims: dict) -> int | None:
    """A manifest expression's value at the manifest's static ``dims`` (None if it names the
    dynamic dim)."""

    try:
        return evaluate(expr, {k: v for k, v in dims.items() if v is not None})
    except DimError:
        return None


def bound(ref, lowp, dtype: str) -> float:
    """The pass rule's bound on ``max|out - ref|`` for one output (step 4 above; the one home of
    the rule, the GPU tests use it too): twice the low-precision pipeline's own error
    ``max|ref_lowp - ref|``, plus ``1e-5 * max|ref|`` for fp32 outputs (statistics ref_lowp
    does not round). Tensors in fp64; an empty output is bound by 0."""
    if not ref.numel():
        return 0.0
    floor = 1e-5 * float(ref.abs().max()) if dtype == "fp32" else 0.0
    return 2 * float((lowp - ref).abs().max()) + floor


def compare(case, dims, name, dtype, got, ref, lowp, untouched) -> Check:
    """One output against the pass rule: every element not declared ``untouched`` written and
    finite, and ``max|got - ref| <= bound(ref, lowp, dtype)``."""

    got, ref, lowp = got.double(), ref.double(), lowp.double()
    if got.shape != ref.shape:
        return Check(
            case,
            dims,
            name,
            tuple(got.shape),
            dtype,
            float("inf"),
            float("inf"),
            0.0,
            0,
            False,
            f"shape {tuple(got.shape)} != reference {tuple(ref.shape)}",
        )
    keep = ~untouched.expand_as(got) if untouched.dim() else torch.ones_like(got, dtype=bool)
    if untouched.dim() and got.dim() == 2:
        keep = ~untouched.reshape(-1, 1).expand_as(got)
    unwritten = int((~torch.isfinite(got) & keep).sum())
    g, r, lo = got[keep], ref[keep], lowp[keep]
    err = (g - r).abs()
    max_err = float(err.max()) if err.numel() else 0.0
    if unwritten:
        max_err = float("nan")
    limit = bound(r, lo, dtype)
    rel = float(err.norm() / r.norm()) if r.numel() and float(r.norm()) else float(err.norm())
    ok = unwritten == 0 and max_err <= limit
    note = f"{unwritten} element(s) unwritten or non-finite" if unwritten else ""
    return Check(
        case, dims, name, tuple(got.shape), dtype, max_err, rel, limit, unwritten, ok, note
    )


def _partials(manifest, env) -> list[tuple[str, int]]:
    out = []
    for step in manifest.kernel_steps():
        for f in step.fields:
            if f.partial:
                buf = env[f.tensor]
                out.append((f.tensor, int((~torch.isfinite(buf)).sum())))
    return out


def _resized(chain, checked, static: dict):
    """``chain`` at the ``static`` dims (``coda_spec.ops.resized``): dims the spec's shape
    rules refuse are its located errors; a build that cannot serve them skips the case."""
    try:
        return ops.resized(chain, static, checked)
    except ops.ResizeRefused as e:
        if e.rules is not None:
            raise e.rules from None
        raise CaseSkipped(e.reason) from None


def verify_case(
    chain,
    checked,
    case: str,
    sizes: dict,
    seed: int,
    reference=None,
    variant: str | None = None,
    memo: dict | None = None,
) -> tuple:
    """Run one shape case. ``reference``: a checked spec whose math is the reference (the
    must-fail test checks a mutant's build against the original spec). ``variant``: a config
    text: run that variant of every kernel step that has it (at these dims) and the fallback of
    the others; None: the chain as it is (a single-variant build). ``memo``: the last case's
    drawn inputs and references, by sizes and seed (:func:`verify_chain` runs every variant of
    a case in a row: what no variant changes is drawn and computed once; an LM head's V x D
    inputs took 12 s each to draw on the CPU, every round)."""

    declared = checked.spec.dim_sizes()
    static = {k: v for k, v in sizes.items() if declared.get(k) is not None and declared[k] != v}
    sizes = {**{k: v for k, v in declared.items() if v is not None}, **sizes}
    runner = _resized(chain, checked, static)
    case_checked = runner.checked() if static else checked
    ref_checked = reference or case_checked
    if reference is not None and static:
        ref_checked = with_dims(reference, static)
    bad = derive_mismatches(case_checked.spec, sizes)  # shapes only (meta tensors)
    if bad:
        raise CaseSkipped("; ".join(bad))
    manifest = runner.manifest
    if variant is not None:
        runner = runner.with_variants(_forced(manifest, variant))
    outputs = manifest.outputs + (manifest.backward_outputs if manifest.has_backward else ())
    key = (tuple(sorted(sizes.items())), seed)
    drawn = None if memo is None else memo.get(key)
    if drawn is None:
        if memo is not None:
            memo.clear()  # one case's tensors at a time
        drawn = _draw_case(case, case_checked, ref_checked, manifest, sizes, seed, outputs)
        if memo is not None:
            memo[key] = drawn
    inputs, grads, ref, lowp, algebra = drawn
    dev = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    env = runner.run(
        {k: v.clone() for k, v in inputs.items()},
        poison=True,
        **({"grads": {k: v.clone() for k, v in grads.items()}} if grads else {}),
    )
    shown = {k: v for k, v in sizes.items()}
    checks = []
    for o in outputs:
        untouched = _untouched(manifest, case_checked.analysis, o.name, inputs)
        checks.append(
            compare(
                case,
                shown,
                o.name,
                o.dtype,
                env[o.name],
                ref[o.name],
                lowp[o.name],
                untouched.to(dev),
            )
        )
    for name, bad in _partials(manifest, env):
        checks.append(
            Check(
                case,
                shown,
                f"{name} (partials)",
                tuple(env[name].shape),
                "fp32",
                0.0,
                0.0,
                0.0,
                bad,
                bad == 0,
                f"{bad} partial slot(s) unwritten" if bad else "every slot written",
            )
        )
    return checks, [(case, *a[1:]) for a in algebra]


def _draw_case(case, case_checked, ref_checked, manifest, sizes, seed, outputs) -> tuple:
    """What a case's variants share: ``(inputs, grads, ref, lowp, algebra)``, the inputs (and
    incoming gradients) drawn on the CPU and moved to the device, the fp64 and low-precision
    references of ``outputs``, and the ``equivalent_to`` rows."""
    low, exact = make_inputs(case_checked.spec, sizes, seed)
    bad = derive_mismatches(case_checked.spec, sizes, {k: tuple(v.shape) for k, v in low.items()})
    if bad:  # a derive the meta evaluation could not size
        raise CaseSkipped("; ".join(bad))
    dev = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    inputs = {k: v.to(dev) for k, v in low.items()}
    grads = None  # a chain with a backward section is verified forward AND backward
    if manifest.has_backward:
        low_g, _ = make_grads(case_checked.spec, case_checked.analysis, sizes, seed + 1)
        grads = {k: v.to(dev) for k, v in low_g.items()}
    keep = [o.name for o in outputs]
    ref = _only(run(ref_checked.analysis, inputs, "fp64", sizes, grads=grads), keep)
    lowp = _only(run(ref_checked.analysis, inputs, "lowp", sizes, grads=grads), keep)
    algebra = []
    if ref_checked.spec.equivalent_to:
        drawn = {"inputs": {k: v.to(dev) for k, v in exact.items()}, "grads": {}}
        for c in check_equivalence(ref_checked, sizes, drawn=drawn):
            algebra.append((case, c.output, c.rel_err, c.rel_err <= 1e-9))
    return inputs, grads, ref, lowp, algebra


def _only(env: dict, names: list) -> dict:
    """The reference values verify compares (the rest of the interpreter's environment, every
    intermediate of the chain, is dropped here so that the next reference has its memory)."""
    return {k: env[k] for k in names}


def fitted_case(
    chain, checked, label, sizes, seed, reference, variant, notes, shrink=True, memo=None
):
    """``verify_case``, fitted to the GPU's memory: on a CUDA out-of-memory the case runs again
    at half the dynamic dim (never below ``SMALL_M``), and ``notes`` says so. ``shrink=False``
    (a ``--dims`` case), or nothing left to halve: a ToolError naming ``--dims``/``--small``."""

    dyn = dynamic_dim(checked.spec.dims)
    while True:
        try:
            got = verify_case(chain, checked, label, sizes, seed, reference, variant, memo)
            return got, sizes
        except torch.OutOfMemoryError as e:
            cause = str(e).split("\n")[0]
        if memo is not None:
            memo.clear()
        _release()  # outside the handler: the traceback's frames no longer hold the tensors
        shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
        m = sizes.get(dyn) if dyn else None
        if not shrink or m is None or m <= SMALL_M:
            raise ToolError(
                f"{label} case ({shown}): the kernels and the fp64 references do not fit in "
                f"GPU memory ({_free_gib()} free; {cause}); pass smaller dims, "
                f"e.g. --dims {dyn or 'M'}={max(SMALL_M, (m or 2 * SMALL_M) // 4)}, or --small"
            )
        smaller = max(SMALL_M, m // 2)
        notes.append(
            f"{label} case: the fp64 references at {dyn}={m} did not fit in GPU memory "
            f"({_free_gib()} free); it ran at {dyn}={smaller}"
        )
        sizes = {**sizes, dyn: smaller}


def _release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _free_gib() -> str:
    if not torch.cuda.is_available():
        return "no GPU"
    free, total = torch.cuda.mem_get_info()
    return f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB"


def variant_rounds(manifest) -> list:
    """The build's candidate configs that some kernel was built at, in order (the fallback
    first), as config keys: one verification round each. One round: a single-variant build."""
    have = {v.name for s in manifest.kernel_steps() for v in s.variants}
    return [c for i, c in enumerate(manifest.configs) if i == 0 or config_text(c) in have]


def _forced(manifest, variant: str) -> dict:
    """{kernel step: variant} for one round: ``variant`` where the step has it, else the
    fallback (index 0). CaseSkipped when no kernel has it (at re-sized dims)."""
    out, hit = {}, False
    for s in manifest.kernel_steps():
        if variant in (v.name for v in s.variants):
            out[s.name], hit = variant, True
        else:
            out[s.name] = 0
    if not hit and variant != config_text(manifest.config):
        raise CaseSkipped(f"no kernel has variant {variant} at these dims")
    return out


def verify_chain(
    chain, seed: int, dims: dict | None = None, only_small: bool = False, reference=None
) -> Report:
    start = time.perf_counter()
    checked = chain.checked()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    checks, algebra = [], list(math_proof(reference or checked, seed))
    notes: list = []
    rounds = variant_rounds(chain.manifest)
    runs = []  # (round, variant, case, sizes), in the report's order: round by round
    for i, key in enumerate(rounds):
        variant = config_text(key) if len(rounds) > 1 else None
        runs += [
            (i, variant, c, z) for c, z in cases(checked, dims, only_small, notes, key["tile_n"])
        ]
    # run case by case, so a case's variants share its inputs and references (``memo``); the
    # report keeps the rounds' order
    groups: dict = {}  # (case, sizes) -> its runs, in the order each first appears
    for j, (_, _, case, sizes) in enumerate(runs):
        groups.setdefault((case, tuple(sorted(sizes.items()))), []).append(j)
    order = [j for js in groups.values() for j in js]
    memo: dict = {}
    got: dict = {}
    for j in order:
        i, variant, case, sizes = runs[j]
        label = f"{case} [{variant}]" if variant else case
        try:
            got[j], _ = fitted_case(
                chain, checked, label, sizes, seed, reference, variant, notes, not dims, memo
            )
        except CaseSkipped as e:  # never abort the chain: note it and run the other cases
            shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
            notes.append(f"{label} case ({shown}) skipped: {e}")
    memo.clear()
    for j, (i, *_) in enumerate(runs):
        if j in got:
            checks += got[j][0]
            if i == 0:  # equivalent_to is the spec's math: once, not once per variant
                algebra += got[j][1]
    notes = list(dict.fromkeys(notes))  # the ragged note of every round once
    return Report(
        chain.name,
        str(chain.directory),
        seed,
        device,
        tuple(checks),
        tuple(algebra),
        seconds=time.perf_counter() - start,
        extra={"notes": notes} if notes else {},
    )


def math_proof(checked, seed: int) -> tuple:
    """The CPU algebra proof (``coda check --math``) as report rows: (case, output, rel_err, ok).

    Forward outputs against ``equivalent_to`` and backward outputs against its autograd, at
    small dims in fp64; an unproven output is a failed row (rel_err inf), never a missing one.
    """

    report = prove(checked, seed, coverage=False)  # its warnings are check --math's
    return tuple(
        ("math" if p.section == "forward" else "math-bwd", p.output, p.rel_err, p.ok)
        for p in report.proofs
    )


def reference_only(checked, seed: int) -> Report:
    """No GPU: the algebra proof at small CPU sizes (the kernels cannot run)."""
    return Report(
        checked.spec.name,
        "",
        seed,
        "cpu",
        (),
        math_proof(checked, seed),
        skipped="no CUDA GPU: kernel numerics were NOT run",
    )
