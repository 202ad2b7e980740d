"""The epilogue items no derivative rule covers: their backward reaches across steps.

Functions of a :class:`~coda_spec.grad.step.StepBuilder` (``step``), called from its
``differentiate``: a LayerNorm's backward and the row sums it takes one step earlier
(``coda_spec.grad.layernorm``), a deferred row scale (its ``sum z dz`` partial, finalized by the
derivation), a row reduction whose finalized result has an incoming gradient (a statistic's norm
term, a log-sum-exp's softmax), and a column gather (a one-hot). Like the rules
(``coda_spec.grad.rules``) they use only the step's methods and its
:class:`~coda_spec.grad.records.DerivationView`.
"""

from __future__ import annotations

from coda_spec.grad.facts import FKernel, Unsupported
from coda_spec.grad.records import Term, Unavailable


def ln_partials(step, p: FKernel) -> None:
    """In the step holding d(acc) of the GEMM that reads a LayerNorm's output: the row sums
    that LayerNorm's backward needs (``coda_spec.grad.layernorm``)."""
    unit = step.d.ln_of(p.a)
    if p.row_scale is not None:
        raise Unsupported(
            f"kernel '{p.name}' row-scales a LayerNorm's output",
            p.row_scale.loc,
            "write this backward by hand",
        )
    step.current = f"{p.name}_acc"
    d = step.mat(step.acc_grad, name=f"d{p.name}_acc")
    z = step.val("acc")
    parts = {"zdz": step.emit(None, "reduce_row", "dot", of=[z, d], name=f"zdz_{unit.out}_part")}
    for kind, vec in (("gdz", unit.gamma_t), ("bdz", unit.beta_t)):
        if kind == "bdz" and vec is None:
            continue
        c = step.load("load_row", step.d.weight_vector(p, vec), save=False)
        prod = step.emit(None, "mul", [d, c], name=f"{d}_{c}")
        parts[kind] = step.emit(None, "reduce_row", "sum", of=prod, name=f"{kind}_{unit.out}_part")
    step.d.lnparts[unit.host] = parts


def ln_backward(step, p: FKernel) -> None:
    """``dx = rstd (g gamma - mean(g gamma) - xhat mean(g gamma xhat))`` in the dgrad
    epilogue of the GEMM after the LayerNorm, from the row sums ``ln_partials`` took."""
    unit = p.ln
    gl = step.g.get((p.index, unit.out_value))
    if not gl:
        return
    done = step.d.lndone.get(unit.host)
    if done is None:
        raise Unavailable(f"the row sums of LayerNorm '{unit.host}'")
    op = None
    first = f"grad of LayerNorm host step '{unit.host}' (line {p.kernel.loc.line})"
    step.current = unit.out_value
    g = step.mat(gl, name=f"d{unit.out}")
    xhat, rstd = step.val(unit.xhat), step.val(unit.rstd)
    gx = g
    if unit.gamma is not None:
        gx = step.emit(op, "mul", [g, step.val(unit.gamma)], name=f"d{unit.xhat}", note=first)
        first = ""
        if step.wants(unit.gamma):
            part = step.emit(op, "reduce_col", "dot", of=[g, xhat], name=f"d{unit.gamma}_part")
            step.contribute_row(unit.gamma, part)
    if unit.beta is not None and step.wants(unit.beta):
        step.val(unit.beta)
        part = step.emit(op, "reduce_col", "sum", of=g, name=f"d{unit.beta}_part")
        step.contribute_row(unit.beta, part)
    mean_g = step.load("load_col", done["gdz"], save=False)
    mean_gx = step.load("load_col", done["zdz"], save=False)
    if "bdz" in done:
        mean_gx = step.emit(
            op,
            "sub",
            [mean_gx, step.load("load_col", done["bdz"], save=False)],
            name=f"mean_{unit.xhat}_g",
        )
    t = step.emit(op, "sub", [gx, mean_g], name=f"{unit.xhat}_centered_g", note=first)
    t = step.emit(op, "sub", [t, step.emit(op, "mul", [xhat, mean_gx])], name=f"{unit.xhat}_proj")
    dx = step.emit(op, "mul", [t, rstd], name=f"d{unit.x}_ln")
    load = next(o for o in p.items if o.prim == "load_tile" and o.get("load_tile") == unit.x)
    step.contribute_tensor(unit.x, [Term(dx)], load)


def row_scale_backward(step, p: FKernel, op) -> None:
    z, r = op.results[0], op.get("mul")[1]
    gz = step.g.get((p.index, z))
    if not gz:
        return
    dz = step.mat(gz, name=f"d{z}")
    try:
        zval = step.val(z)
        dot = [zval, dz]
    except Unavailable:
        dot = _orthogonal_dot(step, p, z)
    part = step.emit(op, "reduce_row", "dot", of=dot, name=f"zdz_{r}_part")
    step.d.zdz.setdefault(r, []).append(part)
    step.d.zdz_left[r] -= 1
    if not step.d.needs(p.index, "acc"):
        return
    # scaled here: p's A is in memory, or another kernel runs p's GEMM (a post-norm's statistic
    # pass), whose d(acc) is summed with p's as a true d(acc) (finish._twin)
    scaled = p.a in step.d.keep or step.d.producer(p.a) is None or step.d.twinned(p)
    alias = len(gz) == 1 and gz[0].load == "load_tile" and gz[0].sign == 1
    g = gz if alias else [Term(dz)]
    if scaled:
        g = [Term(step.emit(op, "mul", [dz, step.load("load_col", r)], name=f"d{z}_r"))]
    step.acc_grad = g
    step.scaled = scaled


def _orthogonal_dot(step, p: FKernel, z: str) -> list:
    users = [
        op
        for op in p.items
        if z in [x for _, v in op.args for x in (v if isinstance(v, list) else [v])]
        and op.prim != "store"
    ]
    if len(users) == 1 and users[0].prim == "rope" and p.stored_as(users[0].results[0]):
        y = users[0].results[0]
        gy = step.g.get((p.index, y))
        if gy:
            return [step.load("load_tile", p.stored_as(y)), step.mat(gy)]
    raise Unavailable(f"'{z}' (the deferred norm's output, for the row dot sum z dz)")


def reduce_backward(step, p: FKernel, op) -> None:
    kind, part = op.get("reduce_row"), op.results[0]
    stat = next((s for s in step.d.stats.values() if s.reduce is op), None)
    if stat is not None:
        zdz = step.d.zdz_done.get(stat.r)
        if zdz is None:
            return
        x = op.get("of")
        r = step.load("load_col", stat.r)
        u = step.emit(op, "mul", [step.val(x), r], name=f"u_{x}")
        uz = step.emit(op, "mul", [u, step.load("load_col", zdz, save=False)], name=f"u_zdz_{x}")
        t = step.emit(op, "mul", [uz, r], name=f"norm_{x}")
        step.contribute(x, step.negate([Term(t)]))
        return
    fin = next(
        (s for s in step.d.spec.steps if getattr(s, "of", None) == part and s.kind == "finalize"),
        None,
    )
    g = step.d.pending.pop(fin.result, None) if fin is not None else None
    if not g:
        return
    if kind == "logsumexp":
        x = op.get("of")
        lse = step.load("load_col", fin.result)
        shifted = step.emit(op, "sub", [step.val(x), lse])
        prob = step.emit(op, "exp", shifted, name=f"softmax_{x}")
        step.contribute(x, step.grad(step.emit(op, "mul", [prob, step.mat(g)])))
        return
    raise Unsupported(
        f"the gradient of a '{kind}' row reduction's {fin.op} ('{fin.result}')",
        op.loc,
        "mark the output 'differentiable: false', or write this backward by hand",
    )


def gather_backward(step, p: FKernel, op) -> None:
    g = step.g.get((p.index, op.results[0]))
    if not g:
        return
    hot = step.emit(op, "onehot", op.get("index"), name=f"onehot_{op.get('index')}")
    step.d.save.add(op.get("index"))
    step.contribute(op.get("gather_col"), step.grad(step.emit(op, "mul", [hot, step.mat(g)])))
