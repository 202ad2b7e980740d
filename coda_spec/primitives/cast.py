"""`cast`: round a value to a storage dtype and keep computing in fp32.

Use it where the fused kernel must see exactly what an unfused one would read back from memory
(for example a bf16 activation that is both stored and reused). The reference rounds in every
precision mode, fp64 included, because the rounding is part of the spec's math, so
``equivalent_to`` states it with the same rounding, ``h = bf16(silu(x @ w.T))``, or the proof
fails by about one bf16 rounding (a store, by contrast, never rounds in the proof).
"""

from coda_spec.dtypes import dtype as dtype_of
from coda_spec.primitives._ranges import ranged
from coda_spec.primitives.base import (
    DTYPES,
    ELEMENTWISE,
    VALUE_REF,
    Primitive,
    broadcast,
    item_schema,
)


def _lower(lc, op):
    x = lc.v(op.get("cast"))
    fn = {"bf16": "round_bf16", "fp16": "round_fp16", "fp32": ""}[op.get("dtype")]
    expr = lc.lanewise(fn, x) if fn else x.expr
    lc.let(op.results[0], expr, x.form)


def _host(hc, op):
    x = hc.value(op.get("cast"))
    dtype = op.get("dtype")
    if dtype == "fp32":
        hc.let(op.results[0], list(x.lanes))
        return
    ty = dtype_of(dtype).triton
    hc.let(op.results[0], [f"{lane}.to({ty}).to(tl.float32)" for lane in x.lanes])  # RTNE


PRIMITIVE = ranged(
    Primitive(
        name="cast",
        family=ELEMENTWISE,
        summary="Round a value to `dtype` (bf16, fp16, fp32); the result stays an fp32 value.",
        example="- {cast: h, dtype: bf16, as: h_bf16}",
        schema=item_schema(
            "cast", VALUE_REF, {"dtype": {"enum": list(DTYPES)}}, required=("dtype",)
        ),
        operands=("cast",),
        infer=lambda tc, op, ins, tensors: (broadcast([ins["cast"]], "'cast'"),),
        reference=lambda rt, op, ins, tensors: (rt.round_always(ins["cast"], op.get("dtype")),),
        mutants=lambda op: (op.with_arg("dtype", "fp16" if op.get("dtype") == "bf16" else "bf16"),),
        lower=_lower,
        host=_host,
    )
)
