"""LayerNorm in one backward pass: the host-step idiom, recognized, and its backward's row sums.

A forward host step ``ln = (x - mu) * rsqrt(var + eps) [* gamma] [+ beta]`` over a tensor ``x``
that a kernel stored, with ``mu`` and ``var`` finalized (``mean``, ``var``) from that kernel's
``sum`` and ``sumsq`` reductions of it, is a :class:`LayerNorm` unit. Its backward needs two
full-row sums of the incoming gradient ``g = dz @ W`` of the GEMM ``z = ln @ W.T`` that reads
it: ``mean(g gamma)`` and ``mean(g gamma xhat)``. Computed where ``g`` is (the dgrad epilogue)
they would need a second pass (store g, reduce, then a host step: the two-pass form). Instead
they come from the step that produced ``dz``, one step earlier, by the identities

    sum_n g_n v_n        = dz . (W v)                (any row vector v)
    sum_n g_n gamma_n xhat_n = sum_n g_n (ln_n - beta_n) = dz . z - dz . (W beta)

so the producer of ``dz`` reduces ``dz . z``, ``dz . (W gamma)`` and ``dz . (W beta)`` (the two
vectors are tiny host steps over the weight), and the dgrad epilogue finishes
``dx = rstd (g gamma - mean(g gamma) - xhat mean(g gamma xhat))`` in the same pass, with
``dgamma`` and ``dbeta`` as column reductions. This is RMSNorm's zdz identity with a mean.
"""

from __future__ import annotations

from dataclasses import dataclass

from coda_spec.ir import Finalize, Host, Kernel


@dataclass(frozen=True)
class LayerNorm:
    host: str  # the host step's name
    x: str  # the normalized tensor (stored by a kernel)
    mu: str
    var: str
    n: object  # the width (the finalizes' n)
    rstd: str  # host-step values
    xhat: str
    out_value: str
    out: str  # the tensor the host step stores (the next GEMM's A operand)
    gamma: str | None  # the load_row values of gamma and beta in the host step
    beta: str | None
    gamma_t: str | None  # their tensors
    beta_t: str | None


def _num(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def match(host: Host, spec) -> LayerNorm | None:
    """The :class:`LayerNorm` a host step computes, or None when it is something else."""
    defs = {op.results[0]: op for op in host.body if op.results}
    loads = {v: op for v, op in defs.items() if op.prim.startswith("load_")}
    stores = [op for op in host.body if op.prim == "store"]
    if len(stores) != 1:
        return None
    out_value = stores[0].get("store")
    out = stores[0].get("to") or out_value

    def is_load(v, prim):
        return v in loads and loads[v].prim == prim

    def peel(value, prim):
        """``value = prim(inner, row load)``: (inner, the row load) or (value, None)."""
        op = defs.get(value)
        if op is not None and op.prim == prim:
            a, b = op.get(prim)
            if is_load(b, "load_row"):
                return a, b
            if is_load(a, "load_row"):
                return b, a
        return value, None

    value, beta = peel(out_value, "add")
    value, gamma = peel(value, "mul")
    xhat = value
    op = defs.get(xhat)
    if op is None or op.prim != "mul":
        return None
    centered, rstd = op.get("mul")
    if defs.get(centered) is None or defs[centered].prim != "sub":
        centered, rstd = rstd, centered
    c, r = defs.get(centered), defs.get(rstd)
    if c is None or c.prim != "sub" or r is None or r.prim != "rsqrt":
        return None
    x, mu = c.get("sub")
    eps_op = defs.get(r.get("rsqrt"))
    if eps_op is None or eps_op.prim != "add":
        return None
    var, eps = eps_op.get("add")
    if not (is_load(x, "load_tile") and is_load(mu, "load_col") and is_load(var, "load_col")):
        return None
    if not _num(eps):
        return None
    mu_t, var_t = loads[mu].get("load_col"), loads[var].get("load_col")
    fins = {s.result: s for s in spec.steps if isinstance(s, Finalize)}
    fm, fv = fins.get(mu_t), fins.get(var_t)
    if fm is None or fv is None or fm.op != "mean" or fv.op != "var" or fv.of != fm.of:
        return None
    x_t = loads[x].get("load_tile")
    reduced = _reduced_tensor(spec, fm.of)
    if reduced != x_t:
        return None
    tensor = lambda v: loads[v].get("load_row") if v else None  # noqa: E731
    return LayerNorm(
        host.name,
        x_t,
        mu_t,
        var_t,
        fm.n,
        rstd,
        xhat,
        out_value,
        out,
        gamma,
        beta,
        tensor(gamma),
        tensor(beta),
    )


def _reduced_tensor(spec, partial: str) -> str | None:
    """The stored tensor whose value a kernel's ``reduce_row`` item ``partial`` reduces."""
    for s in spec.steps:
        if isinstance(s, Kernel):
            for op in s.epilogue:
                if op.prim == "reduce_row" and op.results[0] == partial:
                    of = op.get("of")
                    return next(
                        (
                            st.get("to") or st.get("store")
                            for st in s.epilogue
                            if st.prim == "store" and st.get("store") == of
                        ),
                        None,
                    )
    return None
