"""`clamp`: saturate a value into [min, max], bounds given as numbers (either may be left out).

`{clamp: x, min: -448.0, max: 448.0, as: y}` is torch.clamp(x, -448, 448): an fp8 e4m3 range's
saturation before the value is scaled and stored. It is no new math: max(x, min), then
min(that, max), so the GEMM-epilogue text is the lines of the registered `max` and `min`
primitives (a left-out bound drops its line). Mutants move each bound and drop each one, so
the mutation tests need drawn inputs that reach both saturated sides (give the input a wide
enough `range:`); `check --math` warns at a clamp whose operand never passes a bound, and
says which `range:` would make it.
"""

from dataclasses import replace

from coda_spec.errors import ItemError
from coda_spec.primitives._elementwise import parameterised_unary
from coda_spec.primitives.base import moved


def _bounds(params: dict) -> None:
    if not params:
        raise ItemError(
            "'clamp' needs a bound",
            hint="add min:, max: or both, e.g. {clamp: x, min: -448.0, max: 448.0, as: y}",
        )
    if "min" in params and "max" in params and params["min"] > params["max"]:
        raise ItemError(
            f"min ({params['min']!r}) is above max ({params['max']!r}): every value would be "
            "clamped to max",
            key="min",
            hint="swap the bounds",
        )


def _triton(x, **bound):
    text = x if "min" not in bound else f"tl.maximum({x}, {bound['min']})"
    return text if "max" not in bound else f"tl.minimum({text}, {bound['max']})"


def _mutants(op):
    """Each bound moved (``base.moved``) and, with two bounds, each one dropped."""
    given = [k for k in ("min", "max") if op.get(k) is not None]
    shifted = tuple(op.with_arg(k, moved(float(op.get(k)))) for k in given)
    if len(given) < 2:
        return shifted
    return shifted + tuple(replace(op, args=tuple(a for a in op.args if a[0] != k)) for k in given)


PRIMITIVE = parameterised_unary(
    "clamp",
    params={"min": {"type": "number"}, "max": {"type": "number"}},
    optional=("min", "max"),
    torch=lambda rt, x, **bound: rt.torch.clamp(x, **bound),
    cute=(("max", "min"), ("min", "max")),
    triton=_triton,
    summary="Saturate a value into [min, max] (number bounds, either optional): torch.clamp.",
    example="- {clamp: scaled, min: -448.0, max: 448.0, as: sat}",
    mutants=_mutants,
    check=_bounds,
)
