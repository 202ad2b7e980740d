"""Local derivative rules: one per forward primitive, the one home of each vjp.

``RULES[prim](step, op, g)`` receives the backward :class:`~coda_spec.grad.step.StepBuilder`
it emits into, the forward item and the gradient ``g`` of the item's result (a ``Grad``, the
lazy sum of terms the builder keeps), and hands each operand its share with
``step.contribute(operand, grad)``. A rule reads forward values through ``step.val`` (load or
recompute in the backward step) and writes items through ``step.emit``; it never decides where
the item runs: that is the schedule's (``coda_spec.grad.derive``). Rules for what needs the
whole chain (the deferred norm's statistic, the log-sum-exp, the target-logit gather) live in
``coda_spec.grad.special``, since they tie several steps together.

Ranged items (``cols: [lo, hi]``, ``coda_spec.primitives._ranges``) compute
``y = where(lo <= col < hi, f(x, b, ...), x)``, ``x`` their first operand. So ``x``'s gradient
is ``where(in, g * df/dx, g)``: the rule's item that makes it carries the same range, and its
first operand is ``g`` (the incoming gradient), which a ranged item passes through outside the
range (a select, so a derivative that is not finite outside the range never leaks in). Every
other operand's gradient is ``where(in, g * df/db, 0)``: the rule runs on ``g`` masked to the
range (:func:`_inside`: ``g`` less its outside part, ``{sub: [g, g], cols: ...}``, both exact).
An item without a range derives as before, item for item.
"""

from __future__ import annotations

from coda_spec.grad.facts import Unsupported


def _num(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _cols(op) -> dict:
    """``{"cols": [lo, hi]}`` for a ranged item (the module doc), ``{}`` for the others: the
    range the item making the first operand's gradient carries."""
    cols = op.get("cols")
    return {} if cols is None else {"cols": list(cols)}


def _inside(step, op, g) -> list:
    """``g`` inside a ranged item's range and 0 outside (the gradient of an operand other than
    the first, which does not pass through); ``g`` itself for an item without a range."""
    if op.get("cols") is None:
        return g
    gv = step.mat(g)
    out = step.emit(op, "sub", [gv, gv], cols=list(op.get("cols")), name=f"{gv}_outside")
    return step.grad(gv) + step.negate(step.grad(out))


def _add(step, op, g):
    first, *rest = op.get("add")
    step.contribute(first, g)  # a ranged add passes its first operand through: g on both sides
    if any(step.wants(x) for x in rest):
        g_in = _inside(step, op, g)
        for x in rest:
            step.contribute(x, g_in)


def _sub(step, op, g):
    a, b = op.get("sub")
    step.contribute(a, g)
    if step.wants(b):
        step.contribute(b, step.negate(_inside(step, op, g)))


def _neg(step, op, g):
    a = op.get("neg")
    if op.get("cols") is None:
        step.contribute(a, step.negate(g))
    elif step.wants(a):
        step.contribute(a, step.grad(step.emit(op, "neg", step.mat(g), grad_of=a, **_cols(op))))


def _cast(step, op, g):
    step.contribute(op.get("cast"), g)  # rounding passes the gradient through (as autograd does)


def _scale(step, op, g):
    a = op.get("scale")
    d = step.emit(op, "scale", step.mat(g), by=op.get("by"), grad_of=a, **_cols(op))
    step.contribute(a, step.grad(d))


def _mul(step, op, g):
    a, b = op.get("mul")
    for x, other, first in ((a, b, True), (b, a, False)):
        if not step.wants(x):
            continue
        gx, rng = (g, _cols(op)) if first else (_inside(step, op, g), {})
        if _num(other):
            d = step.emit(op, "scale", step.mat(gx), by=other, grad_of=x, **rng)
            step.contribute(x, step.grad(d))
        elif step.kind(x) == "row":  # never the first operand of a ranged item (a tile)
            part = step.emit(
                op, "reduce_col", "dot", of=[step.mat(gx), step.val(other)], name=f"d{x}_part"
            )
            step.contribute_row(x, part)
        else:
            d = step.emit(op, "mul", [step.mat(gx), step.val(other)], grad_of=x, **rng)
            step.contribute(x, step.grad(d))


def _div(step, op, g):
    a, b = op.get("div")
    if _num(b):
        step.contribute(a, step.grad(step.emit(op, "scale", step.mat(g), by=1.0 / b, **_cols(op))))
        return
    q = step.emit(op, "div", [step.mat(g), step.val(b)], **_cols(op))
    if step.wants(a):
        step.contribute(a, step.grad(q))
    if not step.wants(b):
        return
    if op.get("cols") is not None:  # q passes g through outside the range: b's is 0 there
        q = step.emit(op, "div", [step.mat(_inside(step, op, g)), step.val(b)])
    t = step.emit(op, "mul", [q, step.val(op.results[0])])
    step.contribute(b, step.negate(step.grad(t)))


def _unary(build):
    """A rule ``g * f'(a)`` from ``build(step, op, a, res) -> the derivative's value name``."""

    def rule(step, op, g):
        a = op.get(op.prim)
        if not step.wants(a):
            return
        d = build(step, op, a, op.results[0])
        dx = step.emit(op, "mul", [step.mat(g), d], grad_of=a, **_cols(op))
        step.contribute(a, step.grad(dx))

    return rule


def _d_square(step, op, a, res):
    return step.emit(op, "scale", step.val(a), by=2.0)


def _d_sqrt(step, op, a, res):
    return step.emit(op, "div", [0.5, step.val(res)])


def _d_rsqrt(step, op, a, res):
    r = step.val(res)
    r3 = step.emit(op, "mul", [step.emit(op, "square", r), r])
    return step.emit(op, "scale", r3, by=-0.5)


def _d_exp(step, op, a, res):
    return step.val(res)


def _d_log(step, op, a, res):
    return step.emit(op, "div", [1.0, step.val(a)])


def _d_tanh(step, op, a, res):
    return step.emit(op, "sub", [1.0, step.emit(op, "square", step.val(res))])


def _d_sigmoid(step, op, a, res):
    s = step.val(res)
    return step.emit(op, "mul", [s, step.emit(op, "sub", [1.0, s])])


def _d_silu(step, op, a, res):
    x = step.val(a)
    s = step.emit(op, "sigmoid", x)
    xt = step.emit(op, "mul", [x, step.emit(op, "sub", [1.0, s])])
    return step.emit(op, "mul", [s, step.emit(op, "add", [xt, 1.0])])  # s (1 + x (1 - s))


def _d_squared_relu(step, op, a, res):
    return step.emit(op, "scale", step.emit(op, "relu", step.val(a)), by=2.0)


def _d_softcap(step, op, a, res):
    t = step.emit(op, "scale", step.val(res), by=1.0 / float(op.get("cap")))
    return step.emit(op, "sub", [1.0, step.emit(op, "square", t)])


def _d_erf(step, op, a, res):
    """erf'(x) = 2 / sqrt(pi) exp(-x^2)."""
    minus_x2 = step.emit(op, "scale", step.emit(op, "square", step.val(a)), by=-1.0)
    return step.emit(op, "scale", step.emit(op, "exp", minus_x2), by=1.1283791670955126)


def _gelu(step, op, g):
    """``dgelu`` of the same form (``approximate:``, kept only where the item states it)."""
    a = op.get("gelu")
    if not step.wants(a):
        return
    form = {} if op.get("approximate") is None else {"approximate": op.get("approximate")}
    dx = step.emit(op, "dgelu", [step.mat(g), step.val(a)], grad_of=a, **_cols(op), **form)
    step.contribute(a, step.grad(dx))


def _gated(bwd: str):
    def rule(step, op, g):
        z = op.get(op.prim)
        if not step.wants(z):
            return
        dz, recomputed = step.emit_pair(op, bwd, step.mat(g), z=step.tile(z))
        step.recomputed(op.results[0], recomputed)
        more = [t.name for t in step.g.get((step.fk.index, z), []) if t.load == "load_tile"]
        if more and step.done().kind == "kernel":
            raise Unsupported(
                f"a gradient of '{z}' in memory ({', '.join(more)}) besides {op.prim}'s: the "
                f"GEMM epilogue running {bwd} reads '{z}' as its one packed pair tile and can "
                "load no other tile",
                op.loc,
                f"leave '{step.fk.stored_as(z) or z}' out of --from if it is an output saved "
                "for the backward only, or mark that output 'differentiable: false'",
            )
        step.contribute(z, step.grad(dz))

    return rule


def _rope(step, op, g):
    z = op.get("rope")
    if not step.wants(z):
        return
    extra = {k: v for k, v in op.args if k not in ("rope", "as", "pos", "freqs", "cols")}
    if extra:
        raise Unsupported(
            f"rope with {', '.join(sorted(extra))}: the derivation handles whole-width "
            "adjacent-pair rope",
            op.loc,
            "write this kernel's backward by hand",
        )
    for key in ("pos", "freqs"):
        step.no_grad(op.get(key), op, f"rope's {key}")
    pos, freqs = step.val(op.get("pos")), step.val(op.get("freqs"))
    dz = step.emit(op, "rope_bwd", step.mat(g), pos=pos, freqs=freqs, grad_of=z, **_cols(op))
    step.contribute(z, step.grad(dz))


def _dropout(step, op, g):
    """d(x * m / (1 - p)) = g * m / (1 - p): the same dropout of the gradient, its mask drawn
    again from the same seed and offset (the philox item re-run over the gradient's tile)."""
    x, u = op.get("dropout")
    if not step.wants(x):
        return
    draw = step.fk.defining(u)
    if draw is None or draw.prim != "philox":
        raise Unsupported(
            "a dropout whose uniforms are not a philox item of the same epilogue",
            op.loc,
            "write this kernel's backward by hand",
        )
    gv = step.mat(g)
    keys = {k: v for k, v in draw.args if k not in ("philox", "as")}
    for v in keys.values():
        if isinstance(v, str):
            step.save(v)
    again = step.emit(draw, "philox", gv, name=f"{u}_again", **keys)
    p = op.get("p")
    step.contribute(x, step.grad(step.emit(op, "dropout", [gv, again], p=p, grad_of=x)))


def _leaf(step, op, g):
    step.contribute_tensor(op.get(op.prim), g, op)


RULES = {
    "add": _add,
    "sub": _sub,
    "neg": _neg,
    "cast": _cast,
    "scale": _scale,
    "mul": _mul,
    "div": _div,
    "square": _unary(_d_square),
    "sqrt": _unary(_d_sqrt),
    "rsqrt": _unary(_d_rsqrt),
    "exp": _unary(_d_exp),
    "erf": _unary(_d_erf),
    "log": _unary(_d_log),
    "tanh": _unary(_d_tanh),
    "sigmoid": _unary(_d_sigmoid),
    "silu": _unary(_d_silu),
    "squared_relu": _unary(_d_squared_relu),
    "softcap": _unary(_d_softcap),
    "gelu": _gelu,
    "swiglu": _gated("dswiglu"),
    "geglu": _gated("dgeglu"),
    "rope": _rope,
    "dropout": _dropout,
    "load_tile": _leaf,
    "load_row": _leaf,
    "load_col": _leaf,
    "load_scalar": _leaf,
}
