"""Shared checks for primitives that read chain tensors (loads, gathers, one-hot masks), and the
per-row operand and column compares their GEMM-epilogue lowerings share."""

from __future__ import annotations

from coda_spec.dtypes import FP32_EXACT
from coda_spec.errors import ItemError
from coda_spec.primitives.base import INDEX_DTYPES

# Why a per-column table is not read in a packed kernel (``Primitive.no_mode``).
NO_PACKED_TABLE = (
    "a packed_pair kernel (16-bit (even, odd) pairs at twice the accumulator's width) reads no "
    "column table in coda 1: its placement there is not verified on the GPU"
)


def need_rank(info, rank: int, what: str, key: str):
    if len(info.shape) != rank:
        shape = "[" + ", ".join(str(d) for d in info.shape) + "]"
        raise ItemError(f"{what} needs a rank-{rank} tensor; '{info.name}' has shape {shape}", key)


def need_rows(tc, info, what: str, key: str):
    if info.shape[0] != tc.rows:
        raise ItemError(
            f"{what}: '{info.name}' has {info.shape[0]} rows but the tile has {tc.rows}", key
        )


def need_index(info, what: str, key: str):
    if info.dtype not in INDEX_DTYPES:
        raise ItemError(
            f"{what} needs an integer index tensor; '{info.name}' is {info.dtype}",
            key,
            "declare it with dtype: int32 and a range",
        )


def index_tensor(rt, t, info):
    """(safe_index, valid_mask) for an index tensor with an optional ignore_index."""
    idx = t.long()
    if info.ignore_index is None:
        return idx, rt.torch.ones_like(idx, dtype=rt.torch.bool)
    valid = idx != info.ignore_index
    return rt.torch.where(valid, idx, rt.torch.zeros_like(idx)), valid


def host_hit(column: str, idx: str, info) -> str:
    """Triton condition (host kernels): ``column`` is this row's index ``idx``, and the row is
    not ignored. A negative ``ignore_index`` (-100) never equals a column, so it needs no test."""
    if info.ignore_index is not None and info.ignore_index >= 0:
        return f"({column} == {idx}) & ({idx} != {info.ignore_index})"
    return f"{column} == {idx}"


def need_exact_width(tc, what: str, key: str, kernels_only: bool = True):
    """Column indices as fp32 values (every one in a GEMM epilogue; ``col_index``'s in a host
    step too) are exact for widths up to 2^24."""
    if (tc.has_acc or not kernels_only) and isinstance(tc.width, int) and tc.width > FP32_EXACT:
        where = "GEMM N" if tc.has_acc else "the step's width"
        raise ItemError(
            f"{what}: {where} is {tc.width}; column indices are fp32 values, exact up to 2^24",
            key,
            f"split the step over its columns into steps of at most {FP32_EXACT} columns",
        )


def col_operand(lc, tensor: str) -> str:
    """The fn operand of the per-row tensor ``tensor``, a ``ColVecLoad`` (once per kernel):
    fp32 and bf16 as they are, other dtypes (int32 positions and indices) converted to fp32 by
    the runtime (transform ``to_fp32``); epilogue math is fp32."""
    info = lc.info(tensor)
    dtype, transform = (info.dtype, "") if info.dtype in ("fp32", "bf16") else ("fp32", "to_fp32")
    load = lc.op("ColVecLoad", lc.ident(tensor))
    return lc.param(tensor, "col", load, (1, lc.rows), dtype, transform)


def lower_onehot(lc, name: str, tensor: str) -> None:
    """Bind ``name`` to the one-hot tile of the index tensor ``tensor`` in a GEMM epilogue:
    ``select(columns == index, 1.0, 0.0)`` per element (per lane of a column pair in
    ``acc_pair`` mode). An ignored row never hits: a negative ``ignore_index`` (-100) equals no
    column, and one that could (>= 0) makes the hit value a per-row 0/1 computed first."""
    cols, idx = lc.columns(), col_operand(lc, tensor)
    ignore = lc.info(tensor).ignore_index
    on = "1.0"
    if ignore is not None and ignore >= 0:
        on = lc.fresh(f"{lc.ident(name)}_keep")
        lc.line(f"{on} = {lc.call('select', f'{idx} != {float(ignore)!r}', '1.0', '0.0')}")
    hit = lambda column: lc.call("select", f"{column} == {idx}", on, "0.0")  # noqa: E731
    if cols.form == "p":
        a, b = lc.lanes(cols)
        lc.let_pair(name, hit(a), hit(b))
    else:
        lc.let(name, hit(cols.expr), "s")
