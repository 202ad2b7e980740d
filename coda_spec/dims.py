"""Dimension expressions: ``4096``, ``D``, ``2*F``, ``D/head_dim``.

A spec declares named dims in ``dims:``; each is a positive integer (static) or ``dynamic``
(known only at call time, like the token count ``M``). Shapes are lists of dim expressions.
Static expressions fold to integers at check time so shape rules (N % 8, even N for pairs,
head_dim | N) are checked before anything compiles. A dynamic dim may only appear alone: a shape
``[2*M]`` would make the kernel's grid depend on arithmetic the runtime cannot validate cheaply.

A folded dim is an ``int`` or the name of a dynamic dim (``"M"``); two shapes agree when their
folded dims are equal. :func:`evaluate` re-folds with concrete sizes (verify's ``--dims``).
"""

from __future__ import annotations

import ast

Folded = int | str


class DimError(ValueError):
    """An expression is malformed, names an unknown dim, or is not an exact positive integer."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def _parse(expr: str) -> ast.expr:
    from coda_spec.expr import too_deep

    hint = "use names, integers and + - * /, e.g. '2*F'"
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise DimError(f"cannot parse dim expression {_short(expr)}", hint) from e
    if too_deep(tree):
        raise DimError(f"dim expression {_short(expr)} is nested too deeply", hint)
    return tree.body


def _short(expr: str) -> str:
    text = repr(expr)
    return text if len(text) <= 60 else text[:57] + "..."


def fold(expr: int | str, sizes: dict[str, int | None]) -> Folded:
    """Fold ``expr`` with ``sizes`` (None = dynamic). Raises DimError."""
    if isinstance(expr, bool):
        raise DimError(f"dim {expr!r} is not an integer")
    if isinstance(expr, int):
        if expr <= 0:
            raise DimError(f"dim {expr} must be positive")
        return expr
    node = _parse(str(expr))
    if isinstance(node, ast.Name):
        if node.id not in sizes:
            from coda_spec.errors import did_you_mean

            raise DimError(
                f"unknown dim '{node.id}'",
                did_you_mean(node.id, sizes) or "declare it under 'dims:'",
            )
        return node.id if sizes[node.id] is None else sizes[node.id]
    value = _eval(node, sizes, str(expr))
    if value <= 0:
        raise DimError(f"dim expression {expr!r} is {value}; dims must be positive")
    return value


def _eval(node: ast.expr, sizes: dict[str, int | None], text: str) -> int:
    from coda_spec.errors import did_you_mean

    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in sizes:
            raise DimError(f"unknown dim '{node.id}' in {text!r}", did_you_mean(node.id, sizes))
        if sizes[node.id] is None:
            raise DimError(
                f"dynamic dim '{node.id}' cannot appear inside an expression ({text!r})",
                "only static dims take part in dim arithmetic",
            )
        return sizes[node.id]
    if isinstance(node, ast.BinOp) and isinstance(
        node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv)
    ):
        a, b = _eval(node.left, sizes, text), _eval(node.right, sizes, text)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if b == 0 or a % b:
            exact = f" = {a / b:.2f}" if b else ""
            raise DimError(
                f"{text!r} is not an exact integer ({a} / {b}{exact})", _round_hint(a, b, sizes)
            )
        return a // b
    raise DimError(f"unsupported dim expression {text!r}", "use names, integers and + - * /")


def _round_hint(a: int, b: int, sizes) -> str:
    """How to round an inexact quotient: a new dim at the next multiple of 256 (or 8)."""
    if b == 0:
        return "division by zero"
    if a <= 0 or b < 0:
        return "pick dims that divide exactly"
    name = next((n for n in ("F", "N", "W", "R", "NEW_DIM") if n not in sizes), "NEW_DIM")
    up8, up256 = -(-a // (8 * b)) * 8, -(-a // (256 * b)) * 256
    sizes_ = f"{name}: {up8} (the next multiple of 8)"
    if a >= 256 * b and up256 != up8:
        sizes_ = f"{name}: {up256} (the next multiple of 256) or {sizes_}"
    return (
        f"round it: declare a dim under dims:, e.g. {sizes_}, and write {name} here, "
        "or pick dims that divide exactly"
    )


def evaluate(expr: int | str, sizes: dict[str, int]) -> int:
    """Fold with every dim concrete; returns an int."""
    out = fold(expr, dict(sizes))
    if not isinstance(out, int):
        raise DimError(f"dim '{out}' has no size", f"pass it, e.g. --dims {out}=1024")
    return out


def evaluator(expr: int | str):
    """``expr`` parsed once: a function of concrete ``sizes`` giving its int value (the runtime
    evaluates launch arguments per call; a name or an int costs a dict lookup at most)."""
    if isinstance(expr, int):
        return lambda sizes: expr
    node = _parse(str(expr))
    if isinstance(node, ast.Name):
        name = node.id
        return lambda sizes: int(sizes[name])
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        value = node.value
        return lambda sizes: value
    text = str(expr)
    return lambda sizes: _eval(node, sizes, text)


def cdiv(extent: Folded, block: int) -> Folded:
    """Tiles of ``block`` covering ``extent``: an int for a static extent, the expression
    ``cdiv(<extent>,<block>)`` for a dynamic one (partial-buffer shapes)."""
    return -(-extent // block) if isinstance(extent, int) else f"cdiv({extent},{block})"


def show(folded: tuple[Folded, ...]) -> str:
    return "[" + ", ".join(str(d) for d in folded) + "]"
