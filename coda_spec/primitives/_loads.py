"""Shared checks for primitives that read chain tensors (loads, gathers, one-hot masks)."""

from __future__ import annotations

from coda_spec.errors import ItemError
from coda_spec.primitives.base import INDEX_DTYPES


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
