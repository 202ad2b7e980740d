"""`erf`: the error function, erf(x) = 2 / sqrt(pi) * integral_0^x exp(-t^2) dt.

The constituent of exact GELU (`gelu` with `approximate: none`: 0.5 x (1 + erf(x / sqrt 2)),
BERT's, ViT's and GPT-NeoX's) and of its backward (`dgelu`). In a GEMM epilogue it is CuTe's
`cute.math.erf` (MLIR's `math.erf`, lowered to libdevice's `__nv_erff`, CUDA's erff: a maximum
error of 2 ulp; the sm_90a SASS is 7 FMAs and one MUFU.EX2 a value, no call); in a host step
Triton's `tl.math.erf` (libdevice on the GPU, Python's `math.erf` under
Triton's CPU interpreter).
"""

from coda_spec.primitives._elementwise import unary

PRIMITIVE = unary(
    "erf",
    lambda rt, x: rt.torch.erf(x),
    summary="The error function erf(x) (exact GELU's constituent).",
    example="- {erf: acc, as: e}",
    siblings=("tanh",),
    lower="cute.math.erf",
    host="tl.math.erf({x})",
)
