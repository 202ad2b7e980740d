"""Coverage of the fp64 proof (``coda check --math``): items the generated inputs never exercise.

A proof on drawn inputs checks only what those inputs reach. A clamp whose operand never passes
its bounds is the identity on them, so the proof passes with the clamp deleted (issue 22: a
deleted clamp still proved at ``worst 0.0e+00``). ``gaps(case, sizes, drawn)`` finds two kinds,
on the proof's own fp64 run at its small dims:

* **a one-sided branch**: ``relu``/``abs`` whose operand is never negative (or never positive),
  a ``clamp`` bound never passed (or a clamp that always saturates), ``max``/``min`` whose one
  side always wins. Counted element by element on the values the item actually saw, so it is
  exact for the inputs drawn (strict comparisons: a tie takes neither side).
* **a deletion that still passes**: an elementwise item replaced by its operand (its result is
  that operand's value: a clamp deleted). If every output stays where it was, the proof (which
  passed) still passes, so it does not depend on the item. Every elementwise item whose result
  already equals its operand is one (no re-run needed); the branch items are also re-run
  through the reference with the deletion (an item masked downstream), at most
  ``MAX_DELETIONS`` per spec. Other items that change their operand are not re-run: that cost
  one reference run each and tripled the proof's time on the Llama specs.

Each gap names the spec inputs the item's operand depends on (traced through the steps) and,
for a branch, the side the operand never reaches; it proposes a ``range:`` on one of those
inputs that does exercise it, found by re-drawing that input over wider (or narrower) ranges
and re-running the forward steps (``suggest``), or says that none of the tried ranges did.

Column ranges and the proof's dims
----------------------------------
A ranged item (``cols: [lo, hi]``) has two sides: inside the range it computes, outside it
passes its first operand through. Its bounds are dim expressions or literals (``[0, 2048]``: a q
block, half of a fused projection), and the step's width W shrinks with the proof's dims while a
literal does not. ``range_relations(checked)`` is, per step, the order of 0, W and every range
bound of the step (which is below, equal to or above which); the proof's dims must keep it
(``mathcheck.small`` tries smaller dims only while they do), so a range that leaves columns out
at the spec's dims leaves some out at the proof's, and ranges that do not overlap still do not.
The unfused math states the same cut with literals (``z[:, :2048]``, ``where(arange(F) < 2048,
...)``): ``literal_bounds`` finds those of 64 or more (a smaller one keeps its order with every
dim, which never shrinks below 64), and each must stay below, equal to or above each dim as at
the spec's dims (``relations``): deleting the range would otherwise pass a proof at dims where
the literal covers every column. ``uncut_ranges(real, case)`` is the rule over a proof's dims: a
**gap** per item whose range covers its whole tile at ``case``'s dims but not at the spec's
(``real``), whose pass-through side the proof therefore never runs; ``mathcheck.prove`` reports
them with the other gaps (never at the dims ``small`` picks; a guard for dims chosen any other
way).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace

import torch

from coda_spec import dims as dimmod
from coda_spec.expr import parse
from coda_spec.primitives import registry
from coda_spec.primitives._ranges import bounds
from coda_spec.primitives.base import ELEMENTWISE
from coda_spec.prove.equivalence import RTOL, compare, draw
from coda_spec.prove.inputs import make_inputs
from coda_spec.prove.reference import run

BRANCHES = ("relu", "abs", "clamp", "max", "min")
MAX_DELETIONS = 8  # deletion re-runs per spec (branch primitives only)
# fp64's proof ignores rounding, so deleting a cast never changes it: not a coverage gap
NOT_DELETABLE = ("cast",)
# range factors tried on one input: wider first (a bound never reached), then narrower
FACTORS = tuple(2.0**k for k in range(1, 13)) + tuple(2.0**-k for k in range(1, 11))


@dataclass(frozen=True)
class Gap:
    site: tuple  # (section, step index, item index)
    op: object  # the ir.Op
    message: str
    hint: str


def gaps(case, sizes: dict, drawn: dict, seed: int = 0) -> tuple:
    """Every coverage gap of the (small-dims) ``case`` on the proof's ``drawn`` inputs."""
    spec, analysis = case.spec, case.analysis
    grads = drawn["grads"] if spec.backward is not None else None
    seen: dict = {}

    def record(site, op, ins, results):
        seen[site] = (op, ins, results)
        return results

    base = run(analysis, drawn["inputs"], "fp64", sizes, grads=grads, hook=record)
    deps = depends_on(spec)
    out, branch = [], {}
    for site, (op, ins, _results) in seen.items():
        if op.prim in BRANCHES:
            missed = _missed(op, ins[op.prim])
            if missed:
                branch[site] = missed
    deleted = _deletions(case, sizes, drawn, seen, base, branch)
    for site in sorted(set(branch) | set(deleted), key=_order):
        op, ins, _ = seen[site]
        name = _operand_name(op)
        inputs = sorted(deps.get((site, name), ()))
        parts, hint = [], ""
        if site in branch:
            text, side = branch[site]
            parts.append(text)
            hint = suggest(case, sizes, seed, site, side, inputs)
        if site in deleted:
            parts.append(
                f"the proof still passes with this {op.prim} deleted (its result replaced by "
                f"'{deleted[site]}'): it does not depend on the item"
            )
        if not hint:
            hint = _depends_hint(spec, inputs, name)
        out.append(Gap(site, op, "; ".join(parts), hint))
    return tuple(out)


def ranged_items(checked) -> tuple:
    """``(site, op, (lo, hi), width)`` of every ranged item, at ``checked``'s dims."""
    sizes = {d.name: d.size for d in checked.spec.dims if d.size is not None}
    infos = iter(info for _, info in checked.analysis.step_infos())
    out = []
    for section, steps in checked.spec.sections():
        for si, step in enumerate(steps):
            info = next(infos)
            ops = step.ops
            for oi, op in enumerate(ops):
                if op.get("cols") is not None:
                    out.append(((section, si, oi), op, bounds(op, sizes), info.width))
    return tuple(out)


def range_relations(checked) -> dict:
    """``(section, step) -> `` the order of 0, the step's width and its ranges' bounds (the
    module doc): each pair of them as below (-1), equal (0) or above (1)."""
    points: dict = {}
    for (section, si, oi), _op, (lo, hi), width in ranged_items(checked):
        step = points.setdefault((section, si), {"0": 0, "W": width})
        step[f"{oi}.lo"], step[f"{oi}.hi"] = lo, hi
    out = {}
    for key, named in points.items():
        names = sorted(named)
        out[key] = tuple(
            (a, b, (named[a] > named[b]) - (named[a] < named[b]))
            for i, a in enumerate(names)
            for b in names[i + 1 :]
        )
    return out


SMALLEST_SHRUNK = 64  # mathcheck.small never shrinks a dim below this: a smaller literal keeps


def literal_bounds(spec) -> tuple:
    """The integer literals ``equivalent_to`` cuts columns or compares with (a slice bound,
    ``z[:, :2048]``; a comparison, ``where(arange(F) < 2048, ...)``) that a shrunk dim could
    pass: the other half of a literal ``cols:`` range, stated in the unfused math (a negative
    literal, ``target != -100``, cuts no columns)."""
    if spec.equivalent_to is None:
        return ()
    found = set()
    for _target, node in parse(spec.equivalent_to).statements:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Slice):
                parts = (sub.lower, sub.upper)
            elif isinstance(sub, ast.Compare):
                parts = (sub.left, *sub.comparators)
            else:
                continue
            for x in parts:
                if isinstance(x, ast.Constant) and type(x.value) is int:
                    if x.value >= SMALLEST_SHRUNK:
                        found.add(x.value)
    return tuple(sorted(found))


def relations(checked) -> tuple:
    """What the proof's dims must keep of the spec's (the module doc): every step's
    ``range_relations``, and each ``literal_bounds`` literal below, equal to or above each
    static dim."""
    dims = {d.name: d.size for d in checked.spec.dims if d.size is not None}
    literal = tuple(
        (n, name, (n > size) - (n < size))
        for n in literal_bounds(checked.spec)
        for name, size in dims.items()
    )
    return tuple(sorted(range_relations(checked).items())), literal


def uncut_ranges(real, case) -> tuple:
    """A gap per item whose range covers its whole tile at ``case``'s dims but not at the
    spec's (``real``): the proof at ``case``'s dims never runs its pass-through side."""
    at_real = {site: (rng, w) for site, _op, rng, w in ranged_items(real)}
    out = []
    for site, op, (lo, hi), width in ranged_items(case):
        (rlo, rhi), rwidth = at_real[site]
        if (lo, hi) == (0, width) and (rlo, rhi) != (0, rwidth):
            out.append(
                Gap(
                    site,
                    op,
                    f"its range cols: [{lo}, {hi}) covers the whole {width}-column tile at "
                    f"these dims, so its pass-through side is never checked (at the spec's "
                    f"dims it is [{rlo}, {rhi}) of {rwidth} columns)",
                    "prove it at dims that keep the range inside the tile (coda check --math "
                    "does; a smaller tile than the range's bounds cannot)",
                )
            )
    return tuple(out)


def _order(site):
    section, step, item = site
    return (section != "steps", step, item)


def _operand_name(op) -> str:
    raw = op.get(op.prim)
    if isinstance(raw, list):
        return next((x for x in raw if isinstance(x, str)), "")
    return raw if isinstance(raw, str) else ""


def _count(mask) -> int:
    return int(torch.as_tensor(mask).sum())


def _missed(op, x):
    """``(what is never exercised, the side needed)`` for a branch item, or ``None``.

    ``side`` says, for the hint, what the operand must reach (a suggested range must make
    every side taken, this one and the others)."""
    prim = op.prim
    if prim in ("relu", "abs"):
        neg, pos = _count(x < 0), _count(x > 0)
        name = op.get(prim)
        if not neg:
            return (
                f"'{name}' is never negative ({x.numel()} elements, least {float(x.min()):.3g}):"
                f" {prim} is the identity on the generated inputs",
                f"'{name}' goes negative",
            )
        if not pos:
            return (
                f"'{name}' is never positive (largest {float(x.max()):.3g}): {prim} is "
                + ("always 0" if prim == "relu" else "a negation"),
                f"'{name}' goes positive",
            )
        return None
    if prim == "clamp":
        lo, hi = op.get("min"), op.get("max")
        name, n = op.get(prim), x.numel()
        never = []
        if lo is not None and not _count(x < lo):
            never.append((f"below the min bound {float(lo):g} (least {float(x.min()):.3g})", "min"))
        if hi is not None and not _count(x > hi):
            never.append(
                (f"above the max bound {float(hi):g} (largest {float(x.max()):.3g})", "max")
            )
        if never:
            where = " nor ".join(w for w, _ in never)
            bounds = " and ".join(b for _, b in never)
            return (
                f"'{name}' never goes {where} over its {n} elements: clamp's {bounds} "
                f"{'is' if len(never) == 1 else 'are'} never exercised",
                f"'{name}' goes " + " and ".join(w.split(" (")[0] for w, _ in never),
            )
        inside = torch.ones_like(x, dtype=torch.bool)
        if lo is not None:
            inside &= x > lo
        if hi is not None:
            inside &= x < hi
        if not _count(inside):
            return (
                f"'{name}' is always saturated: clamp never passes a value through",
                f"'{name}' lands inside the bounds",
            )
        return None
    a, b = x
    names = [f"{v:g}" if isinstance(v, float) else str(v) for v in op.get(prim)]
    ta, tb = torch.as_tensor(a), torch.as_tensor(b)
    word = "above" if prim == "max" else "below"
    for first, second, (na, nb) in ((ta, tb, names), (tb, ta, names[::-1])):
        wins = first > second if prim == "max" else first < second
        if not _count(wins):
            return (
                f"'{na}' is never {word} '{nb}': {prim} always yields '{nb}' on the generated "
                "inputs",
                f"'{na}' goes {word} '{nb}'",
            )
    return None


def _deletions(case, sizes, drawn, seen, base, branch) -> dict:
    """site -> the operand that replaced the item, for each deletion that still passes.

    The proof passed on ``base`` (the outputs of the recorded run), so a deletion passes exactly
    when it leaves every output where it was (to the proof's ``RTOL``): an elementwise item whose
    result already equals its operand passes without a re-run; a branch item that changes its
    operand is re-run through the reference (forward and backward) with its result replaced,
    at most ``MAX_DELETIONS`` per spec. Other items are not re-run: a re-run costs one
    reference run, and over every item of a Llama layer that tripled the proof's time."""
    spec = case.spec
    prims = registry()
    grads = drawn["grads"] if spec.backward is not None else None
    outs = [o.name for _, os in _sections(spec) for o in os]
    order = sorted(
        (s for s, (op, _, _) in seen.items() if prims[op.prim].family == ELEMENTWISE),
        key=lambda s: (s not in branch, seen[s][0].prim not in BRANCHES, _order(s)),
    )
    out = {}
    tried = 0
    for site in order:
        op, ins, results = seen[site]
        pick = None if op.prim in NOT_DELETABLE else _replacement(op, ins[op.prim], results[0])
        if pick is None:
            continue
        name, value = pick
        if torch.equal(value, results[0]):
            out[site] = name  # the item is the identity on these inputs
            continue
        if op.prim not in BRANCHES or tried >= MAX_DELETIONS:
            continue
        tried += 1

        def delete(at, op, ins, results, site=site, value=value):
            return (value,) if at == site else results

        got = run(case.analysis, drawn["inputs"], "fp64", sizes, grads=grads, hook=delete)
        if all(compare(n, got[n], base[n]).rel_err <= RTOL for n in outs):
            out[site] = name
    return out


def _sections(spec):
    yield "forward", spec.outputs
    if spec.backward is not None:
        yield "backward", spec.backward.outputs


def _replacement(op, x, result):
    """``(name, value)``: the item's first value operand of its result's shape, or ``None``."""
    raw = op.get(op.prim)
    pairs = zip(raw, x, strict=True) if isinstance(raw, list) else [(raw, x)]
    for name, value in pairs:
        if isinstance(name, str) and torch.is_tensor(value):
            if value.shape == result.shape:
                return name, value
            try:
                return name, value.expand_as(result)  # a per-row value broadcast over the tile
            except RuntimeError:
                continue
    return None


def depends_on(spec) -> dict:
    """``((site, operand value name)) -> spec inputs`` it is computed from, for every item."""
    prims = registry()
    names = {t.name for t in spec.tensors}
    env: dict = {}
    for t in spec.tensors:
        if t.derive is None:
            env[t.name] = {t.name}
        else:
            words = set(re.findall(r"[A-Za-z_]\w*", t.derive)) & names
            env[t.name] = set().union(*(env.get(w, {w}) for w in words)) if words else set()
    if spec.backward is not None:
        for g, _of in spec.backward.grads:
            env.setdefault(g, set())
    out: dict = {}
    for section, steps in spec.sections():
        for si, step in enumerate(steps):
            if step.kind == "finalize":
                env[step.result] = set().union(*(env.get(p, set()) for p in step.partials()))
                continue
            vals: dict = {}
            if step.kind == "kernel":
                vals["acc"] = set(env.get(step.gemm.a.name, ())) | env.get(step.gemm.b.name, set())
                ops = step.epilogue
            else:
                ops = step.body
            for oi, op in enumerate(ops):
                p = prims[op.prim]
                got: set = set()
                for key in p.operands:
                    for raw in _names(op.get(key)):
                        d = vals.get(raw, env.get(raw, set()))
                        out[((section, si, oi), raw)] = set(d)
                        got |= d
                for key in p.tensors:
                    for raw in _names(op.get(key)):
                        got |= env.get(raw, set())
                if p.results == "none":
                    to = op.get("to")
                    env[to] = set(env.get(to, ())) | got
                    continue
                for r in op.results:
                    if p.family == "reduction":
                        env[r] = set(got)
                    else:
                        vals[r] = set(got)
    return out


def _names(raw) -> list:
    if isinstance(raw, list):
        return [x for x in raw if isinstance(x, str)]
    return [raw] if isinstance(raw, str) else []


def _float_inputs(spec, inputs) -> list:
    return [
        t
        for t in (spec.tensor(n) for n in inputs)
        if t is not None and t.derive is None and t.dtype not in ("int32", "int64")
    ]


def _depends_hint(spec, inputs, name) -> str:
    floats = [t.name for t in _float_inputs(spec, inputs)]
    if not floats:
        return f"'{name}' depends on no generated float input: check that the item is needed"
    return (
        f"'{name}' depends on {', '.join(repr(n) for n in floats)}: give one of them a range: "
        "that drives it into the branch, or remove the item if it is not needed"
    )


def _now(t, sizes) -> str:
    if t.range is None:
        return "is drawn from a normal distribution: no range:"
    lo, hi = _bounds(t, sizes)
    return f"has range [{lo:g}, {hi:g}]"


def _bounds(t, sizes):
    return tuple(float(dimmod.evaluate(b, sizes) if isinstance(b, str) else b) for b in t.range)


def _nice(v: float) -> float:
    if v == 0:
        return 0.0
    return float(f"{v:.3g}")


def suggest(case, sizes: dict, seed: int, site: tuple, side: str, inputs) -> str:
    """A ``range:`` on one of ``inputs`` under which the item at ``site`` has no gap, checked by
    re-drawing the inputs and re-running the steps; or a hint saying none of the tried did."""
    spec = case.spec
    floats = _float_inputs(spec, inputs)
    if not floats:
        return ""
    grads = None
    if spec.backward is not None and site[0] == "backward":
        grads = draw(case, sizes, seed)["grads"]
    for t in floats:
        if t.range is not None:
            lo, hi = _bounds(t, sizes)
        else:
            lo, hi = -2.0, 2.0  # about a standard normal draw's span
        for k in FACTORS:
            cand = (_nice(lo * k), _nice(hi * k))
            if cand[0] >= cand[1]:
                continue
            trial = replace(
                spec,
                tensors=tuple(replace(x, range=cand) if x is t else x for x in spec.tensors),
            )
            _, exact = make_inputs(trial, sizes, seed)
            hit = {}

            def watch(at, op, ins, results, hit=hit):
                if at == site:
                    hit["ins"] = (op, ins)
                return results

            try:
                run(case.analysis, exact, "fp64", sizes, grads=grads, hook=watch)
            except Exception:  # noqa: BLE001 - a range the chain cannot take (a log of negatives)
                continue
            if "ins" in hit:
                op, ins = hit["ins"]
                if _missed(op, ins[op.prim]) is None:  # every side taken now
                    return (
                        f"a range: [{cand[0]:g}, {cand[1]:g}] on '{t.name}' would exercise it "
                        f"({side} there; '{t.name}' {_now(t, sizes)} now)"
                    )
    names = ", ".join(f"'{t.name}'" for t in floats)
    return (
        f"it depends on {names}, but no range: tried on them (each scaled by 1/1024 .. 4096) "
        f"makes it so that {side}: if that cannot happen, the item is not needed"
    )
