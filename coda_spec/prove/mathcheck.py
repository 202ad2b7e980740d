"""Stage ``prove`` (``coda check --math``): the fp64 algebra proof of a checked spec, on CPU.

No build and no compiler: this is the CPU gate that CI without a GPU relies on.

Contract
--------
``prove(checked) -> MathReport`` runs, at small dims (``small``: every static dim shrunk so the
fp64 CPU run takes seconds; the shape rules are re-checked at the small sizes), on fresh random
inputs from a fixed seed:

* forward: every chain output against the ``equivalent_to`` statement that assigns it;
* backward (a ``backward:`` section): every backward output against ``torch.autograd`` of the
  forward ``equivalent_to``, including gradients of forward intermediates
  (``coda_spec.prove.equivalence.check_backward``); a ``backward.recomputes`` output (a forward
  value
  the backward recomputes and stores) against that forward value.

Each output gets one ``Proof``: ``proven`` (relative error <= ``RTOL``), ``mismatch`` or
``unproven`` (nothing states its math: no ``equivalent_to``, an output it does not assign, a
backward output that is not a gradient). Nothing is skipped: a mismatch and an unproven output
both fail the gate (exit 3). ``diagnostics`` locates each failure: a forward output at the
``equivalent_to`` line that assigns it, a backward output at the step item that writes it.
An ``equivalent_to`` or ``derive`` expression that passes ``check`` but cannot be evaluated
(shapes that do not broadcast, a float where a dim goes) raises a ``SpecError`` located at the
failing expression (``evaluation_diag``): invalid input, exit 2, never an internal error.

A passed proof also reports its coverage (``coda_spec.prove.coverage``): the branch items (``relu``,
``abs``, ``clamp``, ``max``, ``min``) whose one side the drawn inputs never take, and the
elementwise items whose deletion still passes. ``coverage_diagnostics`` makes each a located
warning at the item, with a ``range:`` that would exercise it; warnings leave the exit status
alone (0 for a passed proof).

Memory: before drawing anything, :func:`proof_bytes` estimates what the proof at the chosen dims
holds; over ``PROOF_BYTES`` every output is ``unproven`` with that reason (a dim the shrink
cannot bring down, ``V: 1e9``, would otherwise allocate until the machine runs out).

Why fp64 and small dims: the fused chain and the unfused math are different orders of the same
arithmetic, so in fp64 they agree to ~1e-15 when the algebra is right and differ by O(1) when it
is not (a swapped gate/up, a dSwiGLU under a GeGLU forward). Small dims keep every algebraic
structure (pairs, heads, tiles of the reduction) and make the run take seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from coda_spec.check.analyze import program_diag
from coda_spec.check.frontend import Checked, with_dims
from coda_spec.check.order import unlisted_hint
from coda_spec.dims import DimError, evaluate
from coda_spec.errors import Diagnostic, SpecError
from coda_spec.expr import ExprError, parse
from coda_spec.primitives.gelu import FORM_HINT, other_form

M_SMALL = 48
SHRINK = (16, 8, 4, 2, 1)  # tried in order until the spec's shape rules hold at the small dims


def small(checked: Checked, factors=SHRINK) -> Checked:
    """``checked`` re-analyzed at small static dims: d -> max(d // f, min(d, 64)).

    The first candidate whose dims pass every shape rule, whose derived inputs follow them, and
    that keeps every column range's relation to its step's width and to the other ranges of the
    step, and every literal bound of ``equivalent_to``'s to each dim (``coverage.relations``: a
    literal does not shrink with the dims, so at F = 2048 ``cols: [0, 2048]`` would cover the
    whole tile, and the pass-through half of an F = 4096 spec would never be tested) wins. Each
    factor is tried on every dim, then, for a spec with ranges or literal bounds, with one dim
    kept at its size (the width a literal range cuts); f = 1 keeps the spec's own dims, which
    keep every relation.
    """
    from coda_spec.prove.coverage import relations as kept
    from coda_spec.prove.inputs import derive_mismatches

    relations = kept(checked)
    static = [d for d in checked.spec.dims if d.size]
    last = None
    for f in factors:
        shrunk = {d.name: max(d.size // f, min(d.size, 64)) for d in static}
        keeps = [None] + ([d.name for d in static] if any(relations) and f > 1 else [])
        for keep in keeps:
            ov = {**shrunk, **({keep: checked.spec.dim_sizes()[keep]} if keep else {})}
            try:
                case = with_dims(checked, ov)
            except SpecError as e:
                last = last if keep else e  # the every-dim candidate's error, if all fail
                continue
            if f == 1:
                return case
            # a derive with a fixed count (cat([q_norm] * 4)) does not follow shrunk dims
            if derive_mismatches(case.spec, sizes_of(case)):
                continue
            if kept(case) == relations:
                return case
    raise last


def sizes_of(checked: Checked, m: int = M_SMALL) -> dict:
    """Every dim bound: static dims as declared, dynamic ones (M) to ``m``."""
    return {d.name: (d.size if d.size is not None else m) for d in checked.spec.dims}


@dataclass(frozen=True)
class Proof:
    section: str  # "forward" | "backward"
    output: str
    status: str  # "proven" | "mismatch" | "unproven"
    rel_err: float
    max_abs: float
    note: str = ""
    factor: float | None = None  # the output is factor x the expected value everywhere
    recomputes: str = ""  # a backward output that recomputes this forward tensor (no gradient)
    other_gelu: bool = False  # a mismatch that equivalent_to with its gelu()s' other form proves

    @property
    def ok(self) -> bool:
        return self.status == "proven"

    @property
    def kind(self) -> str:
        """What the proof compares: "forward", "backward" (a gradient) or "recomputes"."""
        return "recomputes" if self.recomputes else self.section


@dataclass(frozen=True)
class MathReport:
    spec: str
    sizes: dict
    seed: int
    proofs: tuple  # tuple[Proof, ...]
    seconds: float
    gaps: tuple = ()  # coverage.Gap: items the drawn inputs never exercise (a passed proof only)

    @property
    def ok(self) -> bool:
        return bool(self.proofs) and all(p.ok for p in self.proofs)

    def summary(self) -> str:
        parts = []
        kinds = (
            ("forward", "forward outputs", "equal equivalent_to"),
            ("backward", "backward outputs", "equal autograd"),
            ("recomputes", "recomputed values", "equal the forward"),
        )
        for section, noun, what in kinds:
            ps = [p for p in self.proofs if p.kind == section]
            if not ps:
                continue
            good = [p for p in ps if p.ok]
            worst = max((p.rel_err for p in good), default=0.0)
            parts.append(f"{len(good)}/{len(ps)} {noun} {what} (worst {worst:.1e})")
        dims = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        return f"math: {'; '.join(parts) or 'nothing proven'} in fp64 at {dims}"


def prove(checked: Checked, seed: int = 0, coverage: bool = True) -> MathReport:
    """The algebra proof of one checked spec (see the module docstring); ``coverage``: when
    every output is proven, also look for the items the drawn inputs never exercise
    (``coda_spec.prove.coverage``; reported as warnings by :func:`coverage_diagnostics`)."""
    from coda_spec.prove.coverage import gaps, uncut_ranges
    from coda_spec.prove.equivalence import RTOL, check_backward, check_equivalence, draw

    start = time.perf_counter()
    spec = checked.spec
    if spec.equivalent_to is None:
        proofs = tuple(
            Proof(section, o.name, "unproven", float("inf"), float("inf"), "no equivalent_to")
            for section, outs in _sections(spec)
            for o in outs
        )
        return MathReport(spec.name, {}, seed, proofs, time.perf_counter() - start)
    case = small(checked)
    sizes = sizes_of(case)
    need = proof_bytes(case, sizes)
    if need > PROOF_BYTES:
        why = (
            f"the fp64 proof at these dims would hold about {need / 2**30:.1f} GiB (over the "
            f"{PROOF_BYTES / 2**30:.0f} GiB a CPU proof may take): the proof shrinks static "
            "dims by at most 16 and only where every shape rule and range still holds; "
            "prove a copy at smaller dims"
        )
        proofs = tuple(
            Proof(section, o.name, "unproven", float("inf"), float("inf"), why)
            for section, outs in _sections(spec)
            for o in outs
        )
        return MathReport(spec.name, sizes, seed, proofs, time.perf_counter() - start)
    try:
        drawn = draw(case, sizes, seed)
        forward = check_equivalence(case, sizes, drawn=drawn)
        backward = check_backward(case, sizes, drawn=drawn) if spec.backward is not None else []
    except ExprError as e:  # an expression that parses and checks but cannot be evaluated
        raise SpecError([evaluation_diag(checked, e, sizes)]) from e
    proofs = []
    got = {c.output: c for c in forward}
    for o in spec.outputs:
        c = got.get(o.name)
        if c is None:
            proofs.append(
                Proof(
                    "forward",
                    o.name,
                    "unproven",
                    float("inf"),
                    float("inf"),
                    f"equivalent_to does not assign '{o.name}'",
                )
            )
        else:
            proofs.append(_proof("forward", c, RTOL))
    proofs += [_proof("backward", c, RTOL) for c in backward]
    if not all(p.ok for p in proofs):
        proofs = _gelu_form(case, sizes, drawn, proofs)
    found = ()
    if coverage and all(p.ok for p in proofs):
        found = gaps(case, sizes, drawn, seed)
    if case is not checked:
        found = uncut_ranges(checked, case) + tuple(found)
    return MathReport(spec.name, sizes, seed, tuple(proofs), time.perf_counter() - start, found)


def _gelu_form(case: Checked, sizes: dict, drawn, proofs: list) -> list:
    """``proofs`` with ``other_gelu`` set on each mismatch that ``equivalent_to`` proves with its
    ``gelu(...)`` calls in the other form (tanh <-> erf; ``primitives.gelu.other_form``): the
    chain's GELU items and the line disagree on the form, which ``diagnostics`` says."""
    from coda_spec.prove.equivalence import RTOL, check_backward, check_equivalence

    text = other_form(case.spec.equivalent_to)
    if text is None:
        return proofs
    swapped = replace(case, spec=replace(case.spec, equivalent_to=text))
    try:
        again = check_equivalence(swapped, sizes, drawn=drawn)
        if case.spec.backward is not None:
            again += check_backward(swapped, sizes, drawn=drawn)
    except ExprError:
        return proofs  # the swapped text cannot be evaluated: no hint, the mismatch stands
    fixed = {c.output for c in again if _proof("", c, RTOL).ok}
    return [
        replace(p, other_gelu=True) if p.status == "mismatch" and p.output in fixed else p
        for p in proofs
    ]


PROOF_BYTES = 8 * 2**30  # what one fp64 proof may hold (CI's machine has 24 GiB, 2 cores)


def proof_bytes(checked: Checked, sizes: dict) -> int:
    """An upper estimate of what the fp64 proof at ``sizes`` holds: every declared and produced
    tensor, and every item's value over its step's rows x width, in fp64, twice (the spec's
    math and ``equivalent_to``'s, with autograd's saved values). A mutated dim (``V: 1e9``)
    would otherwise make ``check --math`` allocate hundreds of GiB before anything fails."""

    def count(shape) -> int:
        n = 1
        for d in shape:
            try:
                n *= evaluate(d, sizes)
            except DimError:
                return 0
        return n

    a = checked.analysis
    elements = sum(count(t.shape) for t in a.tensors)
    for step, info in a.step_infos():
        items = step.ops
        rows = (
            info.rows
            if info.rows is not None
            else next((d.name for d in checked.spec.dims if d.size is None), 1)
        )
        if info.width is not None:
            elements += len(items) * count((rows, info.width))
    return 2 * 8 * elements


def evaluation_diag(checked: Checked, err: ExprError, sizes: dict) -> Diagnostic:
    """The located error for an ``equivalent_to`` or ``derive`` expression that failed to
    evaluate during the proof, at the expression's line and column, naming the proof's dims
    (torch's message quotes sizes at those dims, not the spec's)."""
    dims = ", ".join(f"{k}={v}" for k, v in sizes.items())
    shown = ExprError(f"{err.message} (fp64 proof at {dims})", err.line, err.col, err.hint)
    return program_diag(checked.source, err.path or ("equivalent_to",), shown)


ROUNDING_SIZED = (1e-5, 2e-2)  # rel_err of one fp16/bf16/fp8 rounding (not of wrong algebra)


def _casts(spec) -> list:
    """(spec path, dtype) of every rounding ``cast`` item, in order."""
    found = []
    for section, steps in spec.sections():
        prefix = "steps" if section == "steps" else "backward.steps"
        for si, step in enumerate(steps):
            for oi, op in enumerate(step.ops):
                if op.prim == "cast" and op.get("dtype") != "fp32":
                    found.append((f"{prefix}[{si}].{step.ops_field}[{oi}]", op.get("dtype")))
    return found


def _sections(spec):
    yield "forward", spec.outputs
    if spec.backward is not None:
        yield "backward", spec.backward.outputs


def _proof(section: str, c, rtol: float) -> Proof:
    if c.note:
        return Proof(
            section, c.output, "unproven", c.rel_err, c.max_abs, c.note, recomputes=c.recomputes
        )
    status = "proven" if c.rel_err <= rtol else "mismatch"
    return Proof(
        section, c.output, status, c.rel_err, c.max_abs, factor=c.factor, recomputes=c.recomputes
    )


def _named(p, grads=()) -> str:
    """A proof's subject as users name it: a forward output, a gradient (a backward one in
    ``grads``), a recomputed forward value (one in ``backward.recomputes``), or neither."""
    if p.section == "forward":
        return f"forward output '{p.output}'"
    if p.recomputes:
        return f"recomputed value '{p.output}' (of '{p.recomputes}')"
    return f"gradient '{p.output}'" if p.output in grads else f"backward output '{p.output}'"


def coverage_diagnostics(checked: Checked, report: MathReport) -> list[Diagnostic]:
    """One located warning per coverage gap of a passed proof, at the item never exercised."""
    dims = ", ".join(f"{k}={v}" for k, v in report.sizes.items())
    return [
        checked.source.diag(
            g.op.loc.path,
            f"the proof's inputs never exercise this {g.op.prim} (fp64, {dims}, seed "
            f"{report.seed}): {g.message}",
            g.hint,
            severity="warning",
        )
        for g in report.gaps
    ]


def diagnostics(checked: Checked, report: MathReport) -> list[Diagnostic]:
    """One located error per failed proof (see the module docstring for where each points)."""

    spec, src = checked.spec, checked.source
    assigned = {}
    if spec.equivalent_to is not None:
        for target, node in parse(spec.equivalent_to).statements:
            assigned[target] = node.lineno  # the last assignment wins, as when evaluated
    if spec.equivalent_to is None:
        n = len(report.proofs)
        return [
            src.diag(
                ("name",),
                f"nothing proves this spec's {n} output(s): it has no equivalent_to",
                "add equivalent_to: the unfused math the chain replaces, in standard ops",
            )
        ]
    dims = ", ".join(f"{k}={v}" for k, v in report.sizes.items())
    casts = _casts(spec)
    grads = dict(spec.backward.grads) if spec.backward is not None else {}
    out = []
    for p in report.proofs:
        if p.ok:
            continue
        if p.status == "mismatch":
            what = "equivalent_to" if p.section == "forward" else "autograd of equivalent_to"
            if p.recomputes:
                what = f"the forward value of '{p.recomputes}' (equivalent_to)"
            msg = (
                f"{_named(p, grads)} differs from {what}: rel_err {p.rel_err:.2e}, "
                f"max abs err {p.max_abs:.2e} (fp64, {dims}, seed {report.seed})"
            )
            if p.factor is not None:
                msg += f"; it is {p.factor:.6g} times the expected value everywhere"
        else:
            msg = f"{_named(p, grads)} is not proven: {p.note}"
        if p.section == "forward" and p.output in assigned:
            hint = (
                "the fused steps compute something else than this line states; fix the steps "
                "or the line"
                if p.status == "mismatch"
                else ""
            )
            if p.status == "mismatch" and casts and ROUNDING_SIZED[0] <= p.rel_err:
                if p.rel_err <= ROUNDING_SIZED[1]:
                    where, dt = casts[0]
                    hint = (
                        f"an error this size is a rounding, and {where} casts to {dt}: the "
                        f"proof rounds every cast, so state it in this line, e.g. {dt}(...)"
                    )
            hint = FORM_HINT if p.other_gelu else hint
            err = ExprError(msg, assigned[p.output], 1, hint)
            out.append(program_diag(src, ("equivalent_to",), err))
            continue
        if p.section == "forward":
            hint = f"state it: '{p.output} = ...' in equivalent_to"
            out.append(src.diag(("outputs", p.output), msg, hint, key=True))
            continue
        info = checked.analysis.info(p.output)
        if p.status == "mismatch" and p.recomputes:
            hint = f"the backward recomputes something else than '{p.recomputes}'"
        elif p.status == "mismatch":
            hint = "the backward steps compute something else than the gradient of the forward math"
            if p.factor is not None:
                hint = "a constant factor is off: look for a missing or extra scale, sign or 1/n"
            hint = FORM_HINT if p.other_gelu else hint
        elif not p.recomputes and p.output not in grads:
            hint = unlisted_hint(p.output)
        else:
            hint = ""  # the note already says what to assign in equivalent_to
        if info is not None and info.loc is not None and info.loc.path:
            out.append(src.diag(info.loc.path, msg, hint))
        else:
            out.append(src.diag(("backward", "outputs", p.output), msg, hint, key=True))
    return out
