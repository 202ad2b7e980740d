"""Dimension expressions: ``4096``, ``D``, ``2*F``, ``D/head_dim``.

A spec declares named dims in ``dims:``; each is a positive integer (static) or ``dynamic``
(known only at call time, like the token count ``M``). Shapes are lists of dim expressions.
Static expressions fold to integers at check time so shape rules (N % 8, even N for pairs,
head_dim | N) are checked before anything compiles. A dynamic dim may only appear alone: a shape
``[2*M]`` would make the kernel's grid depend on arithmetic the runtime cannot validate cheaply.

A folded dim is an ``int`` or the name of a dynamic dim (``"M"``); two shapes agree when their
folded dims are equal. :func:`evaluate` re-folds with concrete sizes (verify's ``--dims``).

Symbolic values (why :class:`Sym`)
----------------------------------
The build writes every shape into ``manifest.json`` (and ``lowered.json``) as an expression over
the spec's dims (``"D"``, ``"2*F"``, ``"D/2"``, ``"cdiv(D,256)"``), so that the runtime, verify
and bench can evaluate a build's shapes at other dims without re-running the lowering. The front
end and the lowering compute with folded ints (tile rules, even widths, constants baked into the
generated code); a :class:`Sym` is such an int that also carries the expression it was folded
from. :func:`fold` returns ``Sym(4096, "D")`` for a static dim; ``+ - * / //`` between Syms and
ints give Syms with the combined text, and :func:`cdiv` (the one tile-count helper) gives
``Sym(16, "cdiv(D,256)")``. Everything else about a Sym is the plain int's: ``str``, ``repr``,
``format``, JSON, ``hash`` and ``==`` (so generated code, messages and goldens that print a
value do not change, and a Sym is equal to, and deduplicates with, an int or Sym of the same
value: where the spec makes two dims equal, either text is right). Only the manifest writer
asks for the text (:func:`expr_of`, :func:`exprs`); an ``int(x)`` drops it on purpose.

Division: dims divide exactly (the front end checks it). ``a / b`` and ``a // b`` of a Sym are
Syms (text ``a/b``) when exact; an inexact ``//`` is a plain int (no dim expression has that
value) and an inexact ``/`` a float, as for ints. A negative operand gives a plain int too (the
dim grammar has no unary minus); so does any other operation (``%``, ``-x``, ``max``...).

One evaluator: :func:`evaluator` compiles an expression once -- ints, dim names, ``+ - * /``,
``cdiv(a,b)`` -- into a function of concrete sizes; the runtime's shape functions
(``coda_spec.artifact.shape_fn``) and the compile worker use it.
"""

from __future__ import annotations

import ast

from coda_spec.errors import did_you_mean
from coda_spec.expr import too_deep

Folded = int | str

_ATOM, _MUL, _ADD = 3, 2, 1  # precedence of an expression's outermost operator
_PREC = {"+": _ADD, "-": _ADD, "*": _MUL, "/": _MUL}


class Sym(int):
    """An int folded from a dim expression, carrying that expression's text (``expr``).

    ``prec`` is the precedence of the text's outermost operator (an atom: a name, a literal, a
    call), so combined texts get parentheses only where they need them. Immutable like an int;
    copies and pickles keep the text."""

    def __new__(cls, value: int, expr: str, prec: int = _ATOM):
        self = super().__new__(cls, value)
        self.expr, self.prec = expr, prec
        return self

    def __reduce__(self):
        return (Sym, (int(self), self.expr, self.prec))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def _combine(self, other, op: str, swap: bool):
        """``self op other`` (``other op self`` when ``swap``) as a Sym, or None (plain)."""
        if isinstance(other, bool) or not isinstance(other, int):
            return None
        a, b = (other, self) if swap else (self, other)
        va, vb = int(a), int(b)
        if op == "+":
            value = va + vb
        elif op == "-":
            value = va - vb
        elif op == "*":
            value = va * vb
        else:  # "/": exact quotients only
            if vb <= 0 or va % vb:
                return None
            value = va // vb
        if min(va, vb) < 0:
            return None  # the dim grammar has no unary minus
        (ta, pa), (tb, pb) = _text(a), _text(b)
        prec = _PREC[op]
        if pa < prec:
            ta = f"({ta})"
        if pb < prec or (pb == prec and (op in "-/" or (op == "*" and "/" in tb))):
            tb = f"({tb})"  # a-(b+c), a/(b*c), a*(b/c): the quotient stays the exact one
        return Sym(value, f"{ta}{op}{tb}", prec)

    def __add__(self, other):
        out = self._combine(other, "+", False)
        return int.__add__(self, other) if out is None else out

    def __radd__(self, other):
        out = self._combine(other, "+", True)
        return int.__radd__(self, other) if out is None else out

    def __sub__(self, other):
        out = self._combine(other, "-", False)
        return int.__sub__(self, other) if out is None else out

    def __rsub__(self, other):
        out = self._combine(other, "-", True)
        return int.__rsub__(self, other) if out is None else out

    def __mul__(self, other):
        out = self._combine(other, "*", False)
        return int.__mul__(self, other) if out is None else out

    def __rmul__(self, other):
        out = self._combine(other, "*", True)
        return int.__rmul__(self, other) if out is None else out

    def __floordiv__(self, other):
        out = self._combine(other, "/", False)
        return int.__floordiv__(self, other) if out is None else out

    def __rfloordiv__(self, other):
        out = self._combine(other, "/", True)
        return int.__rfloordiv__(self, other) if out is None else out

    def __truediv__(self, other):
        out = self._combine(other, "/", False)
        return int.__truediv__(self, other) if out is None else out

    def __rtruediv__(self, other):
        out = self._combine(other, "/", True)
        return int.__rtruediv__(self, other) if out is None else out


def _text(x) -> tuple[str, int]:
    """(text, precedence) of a Sym, or of a plain (non-negative) int: its literal."""
    if isinstance(x, Sym):
        return x.expr, x.prec
    return str(int(x)), _ATOM


def expr_of(x):
    """A shape entry as the manifest writes it: a Sym's expression text, a plain int as the int
    (a true literal), a dynamic dim's name as is."""
    if isinstance(x, Sym):
        return x.expr
    if isinstance(x, int) and not isinstance(x, bool):
        return int(x)
    return x


def exprs(data, at=None):
    """``data`` (dicts, lists, tuples as lists) as a manifest or ``lowered.json`` holds it: a new
    structure, ``data`` unchanged. ``at``: the paths of the shape entries, each a tuple of keys
    (``"*"`` any key or index, a tuple of keys any of them), e.g. ``("tensors", "*", "shape")``;
    a Sym under one of them is written as its expression text, any other Sym as its plain int (a
    constant baked into a kernel, like a host kernel's lane count, is not a shape). ``at`` None:
    every Sym is written as its text."""
    if at is None:
        at = ((),)
    if any(not p for p in at):
        return _texts(data)
    if isinstance(data, dict):
        return {k: exprs(v, _below(at, k)) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [exprs(v, _below(at, i)) for i, v in enumerate(data)]
    return int(data) if isinstance(data, Sym) else data


def _below(paths, key) -> tuple:
    """The rest of each path whose first key matches ``key``."""
    return tuple(
        p[1:]
        for p in paths
        if p[0] == "*" or p[0] == key or (isinstance(p[0], tuple) and key in p[0])
    )


def _texts(data):
    if isinstance(data, Sym):
        return data.expr
    if isinstance(data, dict):
        return {k: _texts(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_texts(v) for v in data]
    return data


class DimError(ValueError):
    """An expression is malformed, names an unknown dim, or is not an exact positive integer."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


def dynamic_dim(dims) -> str | None:
    """The name of the dynamic dim of ``dims`` -- a spec's ``Dim``s (``.name``, ``.size``) or a
    manifest's ``dims`` mapping (name -> size, None when dynamic) -- or None when every dim is
    static. The rule every consumer assumes: at most one dim is dynamic (the rows, M); the
    runtime binds it from the inputs, ``bench --m`` and verify's cases size it. More than one
    is a :class:`DimError`."""
    pairs = dims.items() if hasattr(dims, "items") else ((d.name, d.size) for d in dims)
    names = [name for name, size in pairs if size is None]
    if len(names) > 1:
        raise DimError(
            f"dims {', '.join(names)} are all dynamic; coda allows one dynamic dim (the rows, M)"
        )
    return names[0] if names else None


def _parse(expr: str) -> ast.expr:
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
            raise DimError(
                f"unknown dim '{node.id}'",
                did_you_mean(node.id, sizes) or "declare it under 'dims:'",
            )
        return node.id if sizes[node.id] is None else Sym(int(sizes[node.id]), node.id)
    value = _eval(node, sizes, str(expr))
    if value <= 0:
        raise DimError(f"dim expression {expr!r} is {value}; dims must be positive")
    if isinstance(node, ast.Constant):
        return value  # a literal written as text ("128")
    prec = _ATOM if isinstance(node, ast.Call) else _PREC.get(_OPS.get(type(node.op)), _MUL)
    return Sym(value, "".join(str(expr).split()), prec)


_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "/"}


def _eval(node: ast.expr, sizes: dict[str, int | None], text: str, calls: bool = False) -> int:
    """The int value of ``node``; ``calls``: ``cdiv(a,b)`` is allowed (manifest expressions,
    never a spec's dims)."""

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
        a, b = _eval(node.left, sizes, text, calls), _eval(node.right, sizes, text, calls)
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
    if (
        calls
        and isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "cdiv"
        and len(node.args) == 2
        and not node.keywords
    ):
        a, b = (_eval(x, sizes, text, calls) for x in node.args)
        if b <= 0:
            raise DimError(f"{text!r}: cdiv by {b}")
        return -(-a // b)
    raise DimError(f"unsupported dim expression {text!r}", "use names, integers and + - * /")


def constant(expr: int | float | str, sizes: dict[str, int | None]) -> float:
    """The real value of a constant: a number as it is, or text written over the static dims
    (``scale``'s ``by: 1/sqrt(HD)``, a group width ``head_dim``) in numbers, dim names,
    ``+ - * /``, unary minus and ``sqrt(x)``, in float arithmetic (no exact division rule: this is
    a number compiled into a kernel, not a shape). The dynamic dim and unknown names raise
    :class:`DimError`, the latter with a did-you-mean."""
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        return float(expr)
    hint = "use numbers, static dims, + - * / and sqrt(), e.g. '1/sqrt(head_dim)'"
    node = _parse(str(expr))

    def ev(n: ast.expr) -> float:
        if isinstance(n, ast.Constant) and type(n.value) in (int, float):
            return float(n.value)
        if isinstance(n, ast.Name):
            if n.id not in sizes:
                raise DimError(f"unknown dim '{n.id}' in {expr!r}", did_you_mean(n.id, sizes))
            if sizes[n.id] is None:
                raise DimError(
                    f"dynamic dim '{n.id}' is known only at call time; a constant of {expr!r} "
                    "is compiled into the kernel",
                    "read a per-call value from a device scalar: load_scalar, then mul",
                )
            return float(sizes[n.id])
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp) and type(n.op) in _REAL_OPS:
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Div) and b == 0.0:
                raise DimError(f"{expr!r} divides by zero")
            return _REAL_OPS[type(n.op)](a, b)
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id == "sqrt"
            and len(n.args) == 1
            and not n.keywords
        ):
            v = ev(n.args[0])
            if v < 0:
                raise DimError(f"{expr!r} takes the square root of {v:g}")
            return v**0.5
        raise DimError(f"unsupported constant expression {expr!r}", hint)

    return ev(node)


_REAL_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


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
    """``expr`` (a manifest shape entry: an int, a dim name, ``+ - * /`` of them, ``cdiv(a,b)``)
    parsed once: a function of concrete ``sizes`` giving its int value. The one evaluator of
    manifest expressions: the runtime (per call: a name or an int costs a dict lookup at most),
    ``coda_spec.artifact.shape_fn`` and the compile worker use it. A Sym is its int (its
    value was folded at the sizes it was made with)."""
    if isinstance(expr, bool):
        raise DimError(f"dim {expr!r} is not an integer")
    if isinstance(expr, int):
        expr = int(expr)
        return lambda sizes: expr
    node = _parse(str(expr))
    if isinstance(node, ast.Name):  # no int(): a traced size (torch.SymInt) stays symbolic
        name = node.id
        return lambda sizes: sizes[name]
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        value = node.value
        return lambda sizes: value
    return _closure(node, str(expr))


def _closure(node: ast.expr, text: str):
    """``node`` as nested closures, built once (a call then costs a few additions, not a walk of
    the tree). The fast path assumes valid sizes; anything else -- an unknown or dynamic dim, an
    inexact ``/``, ``cdiv`` by zero, an unsupported node -- takes :func:`_eval`, which raises
    exactly its own error."""

    def slow(sizes):
        return _eval(node, sizes, text, calls=True)

    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
        return lambda sizes: value
    if isinstance(node, ast.Name):
        name = node.id

        def size(sizes):
            v = sizes.get(name)
            return v if v is not None else slow(sizes)

        return size
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        fa, fb = _closure(node.left, text), _closure(node.right, text)
        if isinstance(node.op, ast.Add):
            return lambda sizes: fa(sizes) + fb(sizes)
        if isinstance(node.op, ast.Sub):
            return lambda sizes: fa(sizes) - fb(sizes)
        if isinstance(node.op, ast.Mult):
            return lambda sizes: fa(sizes) * fb(sizes)

        def exact(sizes):
            a, b = fa(sizes), fb(sizes)
            return slow(sizes) if b == 0 or a % b else a // b

        return exact
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "cdiv":
        if len(node.args) == 2 and not node.keywords:
            fa, fb = (_closure(x, text) for x in node.args)

            def tiles(sizes):
                a, b = fa(sizes), fb(sizes)
                return slow(sizes) if b <= 0 else -(-a // b)

            return tiles
    return slow


def cdiv(extent: Folded, block: int) -> Folded:
    """Tiles of ``block`` covering ``extent`` (the one tile-count helper): an int for a literal
    extent, ``Sym(n, "cdiv(D,256)")`` for a static one, the text ``cdiv(M,256)`` for a dynamic
    one (partial-buffer shapes)."""
    if isinstance(extent, str):
        return f"cdiv({extent},{expr_of(block)})"
    value = -(-int(extent) // int(block))
    if isinstance(extent, Sym) or isinstance(block, Sym):
        return Sym(value, f"cdiv({expr_of(extent)},{expr_of(block)})")
    return value


def show(folded: tuple[Folded, ...]) -> str:
    return "[" + ", ".join(str(d) for d in folded) + "]"


def parse_dims(text: str | None) -> dict:
    """``--dims NAME=INT,...`` (``M=4096,D=1000``) -> {name: size}; "" or None -> {}. The one
    parser of the option ``verify``, ``bench`` and ``tune`` share. Raises DimError."""
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        name, eq, value = part.partition("=")
        try:
            size = int(value)
        except ValueError:
            size = None
        if not eq or not name.strip().isidentifier() or size is None:
            raise DimError(f"--dims {text!r}: expected NAME=INT,... e.g. D=2048,F=5632")
        out[name.strip()] = size
    return out
