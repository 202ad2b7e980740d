"""`col_index`: the global column index of each column of a tile, 0 .. W - 1, as an fp32 row value.

The value is a per-column vector broadcast over rows (kind ``row``), like a ``load_row`` of an
``arange``: build column masks and position-dependent scales from it with elementwise items. Its
operand names the tile whose columns it indexes; it must be as wide as the step (``acc`` in a
kernel: the columns of the GEMM's N, across every CTA tile). A position-dependent scale:

<!-- yaml: fragment -->
```yaml
- {col_index: acc, as: j}
- {mul: [j, 0.001], as: slope}
- {mul: [acc, slope], as: ramp}         # column j scaled by j / 1000
```

In a GEMM epilogue it is the kernel's column table (fp32 0, 1, ..., N - 1, exact for N up to
2^24), which the runtime fills once per N and device; a pair of adjacent columns in ``acc_pair``
kernels. It does not lower in ``packed_pair`` kernels, nor inside a ``prepass`` statistic's
input; ``coda check`` says so at the item. In a host step it is the column of each lane.
"""

from coda_spec.errors import ItemError
from coda_spec.primitives._loads import NO_PACKED_TABLE, need_exact_width
from coda_spec.primitives.base import VALUE_REF, VECTOR, Primitive, VType, item_schema, need_tile


def _infer(tc, op, ins, tensors):
    tile = need_tile(ins["col_index"], "col_index", "col_index")
    if tile.width != tc.width:
        raise ItemError(
            f"col_index: '{op.get('col_index')}' is {tile.width} wide, not the step's "
            f"{tc.width}; the index is of the step's columns",
            "col_index",
            "index the columns of acc (or of a tile as wide as the step)",
        )
    need_exact_width(tc, "col_index", "col_index", kernels_only=False)
    return (VType("row", tc.width),)


def _reference(rt, op, ins, tensors):
    x = ins["col_index"]
    return (rt.torch.arange(rt.width, dtype=rt.dtype, device=x.device).reshape(1, -1),)


def _lower(lc, op):
    """The kernel's column table, named."""
    cols = lc.columns()
    lc.let(op.results[0], cols.expr, cols.form)


def _host(hc, op):
    n = hc.value_lanes(op.results[0])
    hc.let(op.results[0], [f"{hc.column(n, lane)}.to(tl.float32)" for lane in range(n)])


PRIMITIVE = Primitive(
    name="col_index",
    family=VECTOR,
    summary="The global column index of each column, 0 .. W - 1, as an fp32 per-column value.",
    example="- {col_index: acc, as: j}",
    schema=item_schema("col_index", VALUE_REF),
    operands=("col_index",),
    infer=_infer,
    reference=_reference,
    lower=_lower,
    no_mode={"packed_pair": NO_PACKED_TABLE},
    host=_host,
)
