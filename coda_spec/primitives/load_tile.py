"""`load_tile`: read an extra M x W input tile (residual, saved activation, GEMM C operand).

Its width may equal the accumulator's, half it, or double it: a 16-bit tile twice as wide as the
accumulator is read as packed (even, odd) pairs, which is how backward kernels such as dSwiGLU
read the saved gate/up pre-activation.

A one-byte mask tile (dtype ``uint8`` or ``bool``) reads as fp32 0/1 values (a uint8 as its value),
so a masked residual is ``{load_tile: keep}`` then ``{mul: [acc, keep]}``. In a GEMM epilogue it
goes through QuACK's TileLoad like any aux input: a TMA of 1-byte elements (16-byte rows: the
width a multiple of 16) into shared memory, a universal (non-ldmatrix) shared-to-register copy
(``quack.copy_utils.sm90_get_smem_load_op`` picks ldmatrix for 16-bit types only) and a convert
to fp32. QuACK 0.6.5 maps ``torch.uint8`` to ``cutlass.Uint8`` but has no ``torch.bool`` entry,
so a bool tile is passed as the same bytes viewed as uint8 (``Field`` transform ``as_uint8``).
A host step loads the bytes (``*u8`` or ``*i1``) and converts them.
"""

from coda_spec.errors import ItemError
from coda_spec.primitives._loads import need_rank, need_rows
from coda_spec.primitives.base import TENSOR_REF, TILE, Primitive, VType, item_schema


def _infer(tc, op, ins, tensors):
    info = tensors["load_tile"]
    need_rank(info, 2, "load_tile", "load_tile")
    need_rows(tc, info, "load_tile", "load_tile")
    width = info.shape[1]
    if not tc.width_ok(width):
        raise ItemError(
            f"load_tile: '{info.name}' is {width} wide; tiles here must be "
            f"{tc.width_choices()} wide",
            "load_tile",
        )
    return (VType("tile", width),)


def _lower(lc, op):
    t = op.get("load_tile")
    info = lc.info(t)
    width = info.shape[1]
    if lc.mode == "packed_cd_b16x2" and width != lc.width:
        lc.let(op.results[0], lc.bind_c(t, info.dtype, tuple(info.shape)), "p")
        return
    if lc.mode == "acc_pair" and width != lc.width:
        raise lc.error("acc_pair kernels read tiles as wide as the accumulator")
    # bool has no CuTe element type in QuACK 0.6.5's torch map: the same bytes read as uint8
    dtype, transform = ("uint8", "as_uint8") if info.dtype == "bool" else (info.dtype, "")
    load = lc.op("TileLoad", lc.ident(t))
    name = lc.param(t, "tile", load, tuple(info.shape), dtype, transform)
    if op.results[0] != t:
        lc.let(op.results[0], name, lc.form_of_width(width))
    else:
        lc.bind(t, name, lc.form_of_width(width))


def _host(hc, op):
    t = op.get("load_tile")
    lanes = hc.value_lanes(op.results[0])
    block = f"tl.load({hc.row_ptr(t)} + {hc.offsets(lanes)}{hc.mask_arg(lanes)})"
    hc.let_block(op.results[0], hc.fp32(block, t))


PRIMITIVE = Primitive(
    name="load_tile",
    family=TILE,
    summary="Read an extra input tile (same rows as the accumulator); `as` defaults to its name.",
    example="- {load_tile: x, as: res}",
    schema=item_schema("load_tile", TENSOR_REF, result="optional"),
    operands=(),
    tensors=("load_tile",),
    infer=_infer,
    reference=lambda rt, op, ins, tensors: (rt.load(tensors["load_tile"]),),
    lower=_lower,
    prepass=True,
    host=_host,
)
