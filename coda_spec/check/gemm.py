"""The GEMM of a kernel step, typed for ``analyze``: what QuACK 0.6.5's sm90 mainloop takes.

Operands are matrices of bf16, fp16 or fp8 (both 8-bit when one is; fp8 read k-major only), the
inner dims agree, and K meets the 16-byte TMA row rule. Each refusal is a located error through
the step walker (``check.steps.StepWalker``: its ``err``, ``tensor`` and ``tma_rule``), which
calls :func:`gemm_shape` for each kernel step.
"""

from __future__ import annotations

from coda_spec.dtypes import DTYPES
from coda_spec.primitives.base import FP8_DTYPES

GEMM_DTYPES = ("bf16", "fp16", *FP8_DTYPES)  # what the sm90 mainloop takes as A and B


def _k_major(key: str, opnd) -> bool:
    """Whether a GEMM operand is read k-major: ``a: x`` with x [M, K], ``b: w.T`` with w [N, K]
    (the only layout QuACK 0.6.5's sm90 GEMM takes for fp8; ``GemmSm90.is_valid_dtypes``)."""
    return opnd.transposed == (key == "b")


def gemm_shape(w, step, scope, quiet):
    """A kernel step's GEMM typed: its operands' ranks, dtypes and k-majorness, the inner dims and
    the TMA row rule on K, each a located error through the walker ``w``; (m, n, k, the natural
    output dtype, the operand dtypes), or None when an operand cannot be typed."""
    g = step.gemm
    path = step.loc.path + ("gemm",)
    infos = {}
    for key, opnd in (("a", g.a), ("b", g.b)):
        info = w.tensor(opnd.name, scope, path + (key,), quiet)
        if info is None:
            return None
        if len(info.shape) != 2:
            w.err(
                path + (key,),
                f"gemm operand '{opnd.name}' has rank {len(info.shape)}"
                "; GEMM operands are matrices",
            )
            return None
        if info.dtype not in GEMM_DTYPES:
            w.err(
                path + (key,),
                f"gemm operand '{opnd.name}' is {info.dtype}; the sm90 "
                "mainloop takes bf16, fp16, fp8_e4m3 or fp8_e5m2",
                "cast it when it is stored",
            )
            return None
        if info.dtype in FP8_DTYPES and not _k_major(key, opnd):
            _not_k_major(w, key, opnd, info, path + (key,))
            return None
        rows, cols = info.shape
        infos[key] = (cols, rows) if opnd.transposed else (rows, cols)
    (m, ka), (kb, n) = infos["a"], infos["b"]
    a, b = w.tensor(g.a.name, scope, (), quiet), w.tensor(g.b.name, scope, (), quiet)
    if a.dtype != b.dtype and not (a.dtype in FP8_DTYPES and b.dtype in FP8_DTYPES):
        fp8 = next((t for t in (a, b) if t.dtype in FP8_DTYPES), None)
        w.err(
            path,
            f"gemm operands differ in dtype ({a.dtype} vs {b.dtype})",
            "a and b must share one dtype, bf16 or fp16"
            if fp8 is None
            else "QuACK 0.6.5's sm90 GEMM needs both operands 8-bit for an fp8 one "
            f"('{fp8.name}'); quantize the other to fp8_e4m3 or fp8_e5m2 too (mixed "
            "e4m3 x e5m2 is fine), or declare both bf16",
        )
    if ka != kb:
        flip = f"{g.b.name}" if g.b.transposed else f"{g.b.name}.T"
        fixes = infos["b"][::-1][0] == ka
        w.err(
            path + ("b",),
            f"inner dims differ: a is [{m}, {ka}] but b is [{kb}, {n}]",
            f"did you mean b: {flip}?"
            if fixes
            else "acc = a @ b needs a's columns to equal b's rows; check the shapes of "
            f"'{g.a.name}' and '{g.b.name}'",
        )
        return None
    tma_rule(w, ka, a.dtype, path, "the reduction dim K")
    # An fp8 GEMM's natural output (a store without a dtype) is bf16, not fp8.
    return m, n, ka, "bf16" if a.dtype in FP8_DTYPES else a.dtype, (a.dtype, b.dtype)


def _not_k_major(w, key, opnd, info, path) -> None:
    """An fp8 operand read other than k-major (``a: x.T``, or ``b: w``)."""
    rows, cols = info.shape
    if key == "a":
        how = f"a: {opnd.name}.T reads [{rows}, {cols}] (K first) as A: m-major"
        fix = f"declare '{opnd.name}' as [M, K] ([{cols}, {rows}]) and write a: {opnd.name}"
    else:
        how = f"b: {opnd.name} reads [{rows}, {cols}] (K first) as B: n-major"
        fix = f"declare '{opnd.name}' as [N, K] ([{cols}, {rows}]) and write b: {opnd.name}.T"
    w.err(
        path,
        f"fp8 operand '{opnd.name}' is not k-major ({how}); QuACK 0.6.5's sm90 GEMM takes "
        f"{info.dtype} operands k-major only",
        fix,
    )


def tma_rule(w, width, dtype, path, what):
    """A width TMA moves (K, a loaded or stored tile's row): a multiple of 16 bytes, else a
    located error through the walker ``w``."""
    per = 16 // next((d.bytes for d in DTYPES if d.name == dtype), 2)
    if isinstance(width, int) and width % per:
        w.err(
            path,
            f"{what} is {width} wide; {dtype} rows must be a multiple of {per} "
            "elements (16-byte TMA rows)",
            f"pad it to {width + per - width % per}",
        )
