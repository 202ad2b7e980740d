"""`log`: Natural logarithm."""

from coda_spec.primitives._elementwise import unary

PRIMITIVE = unary(
    "log",
    lambda rt, x: rt.torch.log(x),
    summary="Natural logarithm.",
    example="- {log: p, as: logp}",
    siblings=("sqrt",),
    lower="cute.math.log",
    host="tl.log({x})",
)
