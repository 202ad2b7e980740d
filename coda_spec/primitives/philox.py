"""`philox`: a counter-based uniform random number in [0, 1) per element (Philox4x32-10).

``{philox: acc, seed: seed, offset: step, as: u}`` gives, for the element at global row ``m``
and column ``n`` of the step (``W`` wide), the Philox4x32-10 uniform of the counter
``offset + m * W + n`` under the key ``seed`` (``coda_spec/philox.py`` defines it bit for bit;
it is Triton's ``tl.randint(seed, counter)`` with ``u = (r >> 8) * 2^-24``, exact in fp32).
``seed`` and ``offset`` are int64 device scalars (shape ``[]`` or ``[1]``), so a training loop
changes them per step without a rebuild; a backward step given the same two regenerates the same
numbers (dropout's mask is never saved):

<!-- yaml: fragment -->
```yaml
- {philox: acc, seed: seed, offset: offset, as: u}
- {dropout: [acc, u], p: 0.1, as: h}        # acc * (u >= 0.1) / 0.9
```

Its operand names the tile whose positions it numbers; it must be as wide as the step (``acc``
in a kernel). In a GEMM epilogue the row and column come from the kernel's row and column tables
(fp32, exact below 2^24) and N is a compile-time constant (so the build does not re-size to
another N: ``check.suits.baked_change``; verify's ragged case is skipped, noted); the rounds are
unsigned 32-bit ``mul.lo`` / ``mul.hi`` (``cute.arch.mul_hi``) and xors in
``kernel_lib.philox_uniform``. It
lowers in plain kernels only (not acc_pair / packed_pair, not inside a prepass statistic's input).
The reference computes the same words in int64 torch arithmetic masked to 32 bits, so ``coda
check --math`` and ``coda verify`` compare the numbers exactly. The math language's
``philox_uniform(seed, offset, M, N)`` is the same generator.
"""

from coda_spec import philox as generator  # torch-free at import: its functions import torch
from coda_spec.dtypes import FP32_EXACT
from coda_spec.errors import ItemError
from coda_spec.primitives.base import (
    TENSOR_REF,
    VALUE_REF,
    VECTOR,
    Primitive,
    VType,
    item_schema,
    need_tile,
)
from coda_spec.primitives.lower_api import Code

_PLAIN_ONLY = (
    "philox numbers each element by its own (row, column); coda 1 lowers it in plain kernels "
    "only (a pair kernel's lanes are not numbered)"
)


def _need_scalar(info, key):
    if tuple(info.shape) not in ((), (1,)) or info.dtype != "int64":
        raise ItemError(
            f"philox: {key} '{info.name}' must be an int64 scalar (shape [] or [1]); it is "
            f"{info.dtype} {list(info.shape)}",
            key,
            f"declare {info.name}: {{shape: [], dtype: int64, range: [0, 1000000]}}",
        )


def _infer(tc, op, ins, tensors):
    tile = need_tile(ins["philox"], "philox", "philox")
    if tile.width != tc.width:
        raise ItemError(
            f"philox: '{op.get('philox')}' is {tile.width} wide, not the step's {tc.width}; "
            "the numbers are keyed by the step's columns",
            "philox",
            "number the elements of acc (or of a tile as wide as the step)",
        )
    for key in ("seed", "offset"):
        _need_scalar(tensors[key], key)
    if tc.has_acc:
        if not isinstance(tc.width, int):
            raise ItemError(
                f"philox: GEMM N is the dynamic {tc.width}; the counter's row stride is a "
                "compile-time constant in a GEMM epilogue",
                "philox",
                "give N a size in dims, or compute the numbers in a host step",
            )
        for what, n in (("N", tc.width), ("M", tc.rows)):
            if isinstance(n, int) and n > FP32_EXACT:
                raise ItemError(
                    f"philox: GEMM {what} is {n}; row and column indices are fp32 values in a "
                    "GEMM epilogue, exact up to 2^24",
                    "philox",
                    f"split the GEMM over {what}",
                )
    return (VType("tile", tc.width),)


def _reference(rt, op, ins, tensors):
    x = ins["philox"]
    seed, offset = (generator.scalar_int(tensors[k]) for k in ("seed", "offset"))
    u = generator.uniform(seed, offset, x.shape[0], x.shape[1], device=x.device)
    return (u.to(rt.dtype),)


def _lower(lc, op):
    """``philox_uniform(seed, offset, rows, columns, N)`` (``kernel_lib``), once per element."""
    seed, offset = (
        lc.param(t, "scalar", lc.op("Scalar", lc.ident(t), dtype=_int64(lc)), (), "int64")
        for t in (op.get("seed"), op.get("offset"))
    )
    rows, cols = lc.row_indices(), lc.columns()
    expr = lc.call("philox_uniform", seed, offset, rows.expr, cols.expr, str(int(lc.width)))
    lc.let(op.results[0], expr, "s")


def _int64(lc):
    return Code(lc.use("Int64"))


def _host(hc, op):
    """``tl.randint(seed, offset + row * W + column)`` per lane: Triton's Philox4x32-10 with
    the same key and counter words (``coda_spec/philox.py``), then the top 24 bits."""
    seed, offset = (_host_scalar(hc, op.get(k)) for k in ("seed", "offset"))
    n = hc.value_lanes(op.results[0])
    width = "SLOTS" if n == 1 else f"(SLOTS * {n})"
    lanes = []
    for lane in range(n):
        counter = f"{offset} + row * {width} + {hc.column(n, lane)}"
        word = f"tl.randint({seed}, {counter}).to(tl.uint32, bitcast=True)"
        lanes.append(f"(({word} >> 8).to(tl.int32).to(tl.float32) * 5.9604644775390625e-08)")
    hc.let(op.results[0], lanes)


def _host_scalar(hc, tensor):
    name = hc.fresh(f"{hc.ident(tensor)}_val")
    hc.pre(f"{name} = tl.load({hc.ptr(tensor)}).to(tl.int64)")
    return name


PRIMITIVE = Primitive(
    name="philox",
    family=VECTOR,
    summary="A Philox4x32-10 uniform in [0, 1) per element, keyed by (seed, offset + row*W + col).",
    example="- {philox: acc, seed: seed, offset: offset, as: u}",
    schema=item_schema(
        "philox", VALUE_REF, {"seed": TENSOR_REF, "offset": TENSOR_REF}, ("seed", "offset")
    ),
    operands=("philox",),
    tensors=("seed", "offset"),
    infer=_infer,
    reference=_reference,
    mutants=lambda op: (op.with_arg("seed", op.get("offset")).with_arg("offset", op.get("seed")),),
    bakes_width=True,  # the counter's row stride W is a literal in the epilogue
    lower=_lower,
    no_mode={"acc_pair": _PLAIN_ONLY, "packed_pair": _PLAIN_ONLY},
    host=_host,
)
