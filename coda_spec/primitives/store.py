"""`store`: write a value to a chain tensor (a kernel output, or an input of a later step).

``to`` defaults to the value's own name. ``dtype`` defaults to the dtype declared in ``outputs``,
else to the GEMM's A operand dtype (fp32 for column vectors). With ``add_to: t`` the result is
``t + value`` written in place of ``t`` (QuACK's add_to_output: a TMA reduce-add, no extra read
pass); the new tensor is named by ``to`` and ``t`` may not be read after this step.
Tiles write an M x W tensor; column vectors (a gathered target logit) write a length-M one.

``over: t`` (host steps only) writes the stored tensor into the memory of ``t``, element for
element at the same coordinates: one buffer for both (the LM head's dlogits over its logits, as
Liger does). ``t`` must be a tile this host step reads with ``load_tile`` before the store (each
element is read before it is overwritten, in the same program), an intermediate of the chain of
the stored tensor's shape and dtype (not a chain input, which is the caller's, nor a declared
output), and no later item or step may read ``t``. A GEMM epilogue stores through TMA into a
buffer of its own: ``coda check`` refuses ``over`` there. The checker refuses the rest at the
item (``check.writes.store_item``); the runtime binds the output to ``t``'s buffer, which
``coda verify`` does not poison (it holds the values the step reads).

fp8 stores (``dtype: fp8_e4m3`` / ``fp8_e5m2``, or an fp8 ``outputs`` entry): tiles only (D or an
aux tile of a plain-mode kernel, a half-width tile of an acc_pair kernel through ``PairF8Store``,
or a host step's tile), rounded to nearest even and saturating
at the format's largest finite value (``coda_spec.dtypes`` has the one rule and why the
epilogue's convert already is it: ``cvt.rn.satfinite``); rows must be 16-byte aligned (N % 16),
and an fp8 store cannot ``add_to`` (TMA reduce-add takes fp32/fp16/bf16). The checker refuses the
rest at the item (``check.writes.store_item``).
"""

from coda_spec.errors import ItemError
from coda_spec.primitives.base import (
    DTYPES,
    FP8_DTYPES,
    NAME_RE,
    TENSOR_REF,
    TILE,
    VALUE_REF,
    Primitive,
    item_schema,
)
from coda_spec.primitives.lower_api import Code, Field


def _infer(tc, op, ins, tensors):
    t = ins["store"]
    if t.kind not in ("tile", "col"):
        hint = "finalize partials in a 'finalize' step" if t.kind.endswith("part") else ""
        raise ItemError(f"store writes tiles and per-row vectors, got {t.show()}", "store", hint)
    return (t,)


def _reference(rt, op, ins, tensors):
    v = ins["store"]
    if rt.store_is_col(op):
        v = v.reshape(-1)
    if "add_to" in tensors:
        v = rt.load(tensors["add_to"]) + v
    return (v,)


# The lowering's two refusals of a full-width store after D, with their fixes; analyze asks the
# same (``check.lowering``), so ``coda check`` refuses them too.
ADD_TO_NOT_D = (
    "only the kernel's first full-width store (D) can accumulate (add_to)",
    "make this store the kernel's first full-width one",
)
PAIR_ONE_FULL = (
    "acc_pair kernels store one full-width tile (D) and half-width aux tiles",
    "store the other full-width value from another kernel, or store half of it",
)


def _refusal(op, where, sizes):
    """``over`` in a GEMM epilogue: its stores go through TMA into a buffer of their own."""
    if op.get("over") is None or where == "host":
        return None
    return ItemError(
        f"over: '{op.get('over')}' writes in place in host steps only; a GEMM epilogue stores "
        "each tile into a buffer of its own",
        "over",
        f"drop over: (a second buffer), or store it from a host step that reads "
        f"'{op.get('over')}' with load_tile",
    )


def _lower(lc, op):
    """The first full-width store is D (``add_to``: QuACK's add_to_output); other tiles are
    ``TileStore`` aux outputs; a pending ``gather_col`` value becomes a ``ColVecSelect`` sink
    reading the index tensor through a shared ``ColVecLoad`` (an extra op)."""
    raw, to = op.get("store"), op.get("to")
    info = lc.info(to)
    field = lc.ident(to)
    pending = lc.take_select(raw)
    if pending is not None:
        expr, index = pending
        glob = lc.index_load(index)
        select = lc.op("ColVecSelect", field, idx_op=Code(glob))
        what = f"per row m, {expr} at column {index}[m] -> ({lc.rows},) fp32"
        lc.out_op(field, select, expr, Field(field, to, "select", (lc.rows,), "fp32"), what)
        return
    v = lc.v(raw)
    width = info.shape[1] if len(info.shape) == 2 else None
    if width is None or v.form == "deferred":
        raise lc.error("only tiles and gathered per-row values can be stored from an epilogue")
    d_width = 2 * lc.width if lc.mode == "packed_cd_b16x2" else lc.width
    add_to = op.get("add_to")
    if not lc.has_d() and width == d_width and (lc.mode != "packed_cd_b16x2" or v.form == "p"):
        lc.store_d(to, info.dtype, tuple(info.shape), v.expr, add_to)
        return
    if add_to is not None:
        raise lc.error(*ADD_TO_NOT_D)
    gated = lc.mode == "acc_pair"
    if gated and width == lc.width:
        raise lc.error(*PAIR_ONE_FULL)
    lc.aux_output(field, to, tuple(info.shape), info.dtype, v.expr, gated)


def _host(hc, op):
    """Host kernels: a tile is stored per chunk as one [BLOCK, L] block (its lanes joined), a
    per-row value once per row; both rounded to the tensor's dtype. ``add_to`` reads the old
    tensor and writes the sum to the new one."""
    v = hc.value(op.get("store"))
    to, add_to = op.get("to"), op.get("add_to")
    if v.wide:
        n = len(v.lanes)
        offs = hc.offsets(n)
        block = hc.join(v.lanes)
        if add_to is not None:
            old = hc.fp32(f"tl.load({hc.row_ptr(add_to)} + {offs}{hc.mask_arg(n)})", add_to)
            block = f"{old} + {block}"
        dst = hc.row_ptr(to, write=True)
        hc.line(f"tl.store({dst} + {offs}, {hc.cast(block, to)}{hc.mask_arg(n, other=None)})")
        return
    expr = v.expr
    if add_to is not None:
        expr = f"{hc.fp32(f'tl.load({hc.ptr(add_to)} + row)', add_to)} + {expr}"
    hc.line(f"tl.store({hc.out(to)} + row, {hc.cast(expr, to)})")


PRIMITIVE = Primitive(
    name="store",
    family=TILE,
    summary="Write a value to a chain tensor; `add_to` accumulates into an existing one.",
    example="- {store: x1, dtype: bf16}",
    schema=item_schema(
        "store",
        VALUE_REF,
        {
            "to": {"type": "string", "pattern": NAME_RE},
            "dtype": {"enum": list(DTYPES + FP8_DTYPES)},
            "add_to": TENSOR_REF,
            "over": {
                **TENSOR_REF,
                "description": "a tile the host step loaded, written over in place",
            },
        },
        result="none",
    ),
    operands=("store",),
    tensors=("add_to",),
    results="none",
    infer=_infer,
    reference=_reference,
    lower=_lower,
    host=_host,
    item_refusal=_refusal,
)
