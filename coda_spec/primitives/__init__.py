"""The primitive registry: an explicit list, one module per primitive.

``registry()`` returns a fresh name -> Primitive mapping (no module-level mutable state). The JSON
Schema's ``$defs`` are generated from it, and a test checks that the two agree.
"""

from __future__ import annotations

from types import MappingProxyType

from coda_spec.primitives import (
    add,
    cast,
    dgeglu,
    div,
    dswiglu,
    exp,
    gather_col,
    geglu,
    gelu,
    load_col,
    load_row,
    load_scalar,
    load_tile,
    log,
    mul,
    neg,
    onehot,
    prepass,
    reduce_col,
    reduce_row,
    relu,
    rope,
    rope_bwd,
    rsqrt,
    scale,
    sigmoid,
    silu,
    sqrt,
    square,
    squared_relu,
    store,
    sub,
    swiglu,
    tanh,
    valid,
)

_MODULES = (
    add,
    cast,
    dgeglu,
    div,
    dswiglu,
    exp,
    gather_col,
    geglu,
    gelu,
    load_col,
    load_row,
    load_scalar,
    load_tile,
    log,
    mul,
    neg,
    onehot,
    prepass,
    reduce_col,
    reduce_row,
    relu,
    rope,
    rope_bwd,
    rsqrt,
    scale,
    sigmoid,
    silu,
    sqrt,
    square,
    squared_relu,
    store,
    sub,
    swiglu,
    tanh,
    valid,
)


def registry() -> MappingProxyType:
    """Read-only name -> Primitive map."""
    return MappingProxyType({m.PRIMITIVE.name: m.PRIMITIVE for m in _MODULES})
