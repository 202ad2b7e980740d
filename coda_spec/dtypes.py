"""The one dtype table: every spec dtype name, its element size, its torch and Triton names.

Contract
--------
``DTYPES`` holds the torch-free facts; the checker (the 16-byte TMA row rule), the compile worker
(fake operands), the reference, the runtime and the roofline model read them here and nowhere
else; the Triton names (``tl.bfloat16`` for a cast or a store, ``*bf16`` for a kernel
signature's pointer) are what the host and finalize kernels' text writes. Torch dtypes are given
lazily: ``torch_dtype(name)`` imports torch on its first call, and
``TORCH_DTYPES`` (name -> torch dtype, the name the runtime and the reference import) is built
when it is first looked up, through the module's ``__getattr__``. So importing this module never
imports torch: ``coda check`` stays torch-free (tests/test_robustness.py's
``test_check_imports_no_gpu_stack``), and ``from coda_spec.dtypes import TORCH_DTYPES`` works as
it always did in modules that need torch anyway.

Which dtypes a tensor may declare is the schema's and the checker's business (fp8 is a store
dtype, and an input dtype for GEMM operands only, see ``check.steps``); the primitives'
``DTYPES``/``INDEX_DTYPES``/``MASK_DTYPES``/``FP8_DTYPES`` are the same names grouped by
``kind``.

fp8 rounding, one rule everywhere (measured 2026-12-02, GPU-blind compiles on the build box):
round to nearest even, saturating -- finite values past the largest one (448 for e4m3, 57344
for e5m2; ``DType.max_finite``) become it with their sign, NaN stays NaN.
* CuTe DSL 4.8.1 lowers ``TensorSSA.to(Float8E4M3FN / Float8E5M2)`` (QuACK's D and TileStore
  convert) to ``cvt.rn.satfinite.e4m3x2.f32`` / ``e5m2x2.f32``: the rule itself, so the epilogue
  needs no explicit clamp (PTX read off ``cute.compile(...).__ptx__`` of a probe kernel).
* Triton 3.9's GPU conversion is the same ``cvt.rn.satfinite`` (its libtriton carries those
  strings), but its interpreter (``TRITON_INTERPRET=1``, the CPU tests) converts out-of-range
  values to NaN/inf and mis-rounds a mantissa carry (500 -> 256 in e5m2). So host kernels round
  in fp32 arithmetic first (``coda_spec.primitives.host_api.HostCtx.cast``: clamp, then the fp32
  adder's
  round-to-nearest-even at the fp8 spacing, sign kept), and the final ``.to`` converts an exactly
  representable value: bit for bit :func:`round_to` on the GPU and under the interpreter.
* :func:`round_to` clamps, then converts with torch (round to nearest even); clamping first
  equals satfinite because every value between the largest finite one and the next rounding
  boundary rounds down to it anyway.

Masks (kind ``mask``): ``uint8`` and ``bool`` tensors, one byte per element, read by the tile and
vector loads as fp32 0/1 values (``uint8`` as its value, 0..255; the checker's inputs draw 0 and
1). QuACK 0.6.5 maps ``torch.uint8`` to ``cutlass.Uint8`` (``quack.cute_dsl_utils``) but has no
entry for ``torch.bool``: a GEMM epilogue reads a bool tensor through the same bytes as uint8
(``Field.transform`` ``as_uint8``, a free ``view``), so both go through one TMA path.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

# Integers up to 2^24 in magnitude are exact in fp32, the type of every epilogue value: column
# indices (the runtime's column tables) and index tensors compare exactly below it. The one home
# of the bound: the checker's width and ignore_index rules and the runtime's table check read it.
FP32_EXACT = 2**24


@dataclass(frozen=True)
class DType:
    name: str  # as a spec writes it
    bytes: int  # element size
    torch_name: str  # the attribute of the ``torch`` module
    kind: str  # float | index | mask | fp8
    triton: str = ""  # the triton.language dtype in generated text ("": no Triton kernel takes it)
    triton_ptr: str = ""  # a pointer to it in a Triton kernel signature
    max_finite: float = 0.0  # fp8: the largest finite value (a store saturates there)
    mantissa_bits: int = 0  # fp8: explicit mantissa bits (3 for e4m3, 2 for e5m2)
    min_exponent: int = 0  # fp8: the smallest normal exponent (-6 for e4m3, -14 for e5m2)


DTYPES = (
    DType("bf16", 2, "bfloat16", "float", "tl.bfloat16", "*bf16"),
    DType("fp16", 2, "float16", "float", "tl.float16", "*fp16"),
    DType("fp32", 4, "float32", "float", "tl.float32", "*fp32"),
    DType("int32", 4, "int32", "index", "tl.int32", "*i32"),
    DType("int64", 8, "int64", "index", "tl.int64", "*i64"),
    DType("uint8", 1, "uint8", "mask", "tl.uint8", "*u8"),
    DType("bool", 1, "bool", "mask", "tl.int1", "*i1"),
    DType("fp8_e4m3", 1, "float8_e4m3fn", "fp8", "tl.float8e4nv", "*fp8e4nv", 448.0, 3, -6),
    DType("fp8_e5m2", 1, "float8_e5m2", "fp8", "tl.float8e5", "*fp8e5", 57344.0, 2, -14),
)


def dtype(name: str) -> DType:
    """The table row of a spec dtype; KeyError naming the known ones otherwise."""
    for d in DTYPES:
        if d.name == name:
            return d
    raise KeyError(f"unknown dtype {name!r}; known: {', '.join(d.name for d in DTYPES)}")


def names(kind: str) -> tuple:
    """The dtype names of one kind, in table order: ``names("float")`` -> bf16, fp16, fp32."""
    return tuple(d.name for d in DTYPES if d.kind == kind)


def element_bytes(name: str) -> int:
    return dtype(name).bytes


def torch_dtype(name: str):
    """The torch dtype of a spec dtype (imports torch)."""
    import torch

    return getattr(torch, dtype(name).torch_name)


def round_to(x, name: str):
    """``x`` rounded to the spec dtype ``name`` and returned in ``x``'s own dtype (imports torch).

    Round to nearest even, as the kernels' ``cvt`` instructions do. fp8 saturates: values past the
    format's largest finite value (448 for e4m3, 57344 for e5m2) become it, with their sign, as an
    fp8 ``store`` does; NaN stays NaN. The one rounding rule of the reference's ``cast`` and
    stores and of the math language's ``bf16(x)``/``fp16(x)``/``fp8_e4m3(x)``/``fp8_e5m2(x)``.
    """

    low = torch_dtype(name)
    row = dtype(name)
    if row.kind == "fp8":
        x = x.clamp(-row.max_finite, row.max_finite)
    return x.to(low).to(x.dtype)


def __getattr__(attr: str):
    # PEP 562: ``TORCH_DTYPES`` is made on lookup, so importing this module imports no torch.
    if attr == "TORCH_DTYPES":
        return MappingProxyType({d.name: torch_dtype(d.name) for d in DTYPES})
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
