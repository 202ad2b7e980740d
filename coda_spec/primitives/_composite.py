"""A primitive whose math is one expression over registered elementwise primitives.

``composite(name, body=...)`` turns a few lines of math into a whole primitive: its typing, its
torch reference, its GEMM-epilogue (CuTe) text and its host-step (Triton) text all come from the
one ``body``, each by handing the expression's operations, in order, to the registered primitive
that computes them; so do where it lowers and which configs it supports (its constituents').
Its mutants are each parameter moved and its ``siblings`` swapped in. A new parameterised op is
one call, and its math is written once (issue 22, item 9), where
``_elementwise.parameterised_unary`` takes the torch math, a CuTe chain and a Triton template
separately.

The body is Python expression syntax, parsed once, at import (a malformed body fails the
import, naming the primitive):

* its operands: ``x`` for a one-operand item (``{leaky_relu: acc, slope: 0.01, as: y}``), or
  the names in ``operands=("dy", "z")`` for an item over a list (``{dgelu: [dy, z], as: dz}``);
* its parameters (immediates of the item, compiled into the kernel as constants) and numbers;
* ``+ - * /`` and unary ``-`` (the registered ``add``, ``sub``, ``mul``, ``div``, ``neg``), and
  calls of registered elementwise primitives by name (``relu(x)``, ``tanh(u)``, ``max(a, b)``);
* ``name = expr`` lines before the last, which is the result.

Arithmetic on parameters and numbers alone is folded when the item is known (``1 - slope`` is
one constant in the kernel); the same sub-expression written twice is computed once. The
generated kernel reads as the constituent primitives' own lines, their temporaries named
``<result>_<prim>``, so it follows any change of their text.
"""

from __future__ import annotations

import ast
import importlib
import operator
from dataclasses import dataclass, replace

from coda_spec.primitives._ranges import ranged
from coda_spec.primitives.base import (
    ELEMENTWISE,
    OPERAND,
    VALUE_REF,
    Primitive,
    VType,
    broadcast,
    item_schema,
    moved,
)

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
_FOLD = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv}


@dataclass(frozen=True)
class _Step:
    """One operation of a planned body: ``prim`` over ``args``, each ``("in", i)`` (the item's
    i-th operand), ``("step", j)`` (an earlier step's result) or ``("num", value)``."""

    prim: str
    args: tuple


class _Body:
    """The parsed body: ``plan(values)`` gives its steps for one item's parameter values."""

    def __init__(self, name: str, text: str, operands: tuple, params: tuple):
        self.name, self.operands, self.params = name, operands, params
        try:
            tree = ast.parse(text.strip(), mode="exec")
        except SyntaxError as e:
            raise ValueError(f"composite '{name}': its body is not an expression: {e}") from e
        *lets, last = tree.body or [None]
        if not isinstance(last, ast.Expr) or not all(
            isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
            for s in lets
        ):
            raise ValueError(
                f"composite '{name}': a body is 'name = expr' lines, then the result expression"
            )
        self.lets = tuple((s.targets[0].id, s.value) for s in lets)
        self.result = last.value
        self.plan(dict.fromkeys(params, 0.5))  # every name resolves, at import

    def plan(self, values: dict) -> list[_Step]:
        steps: list[_Step] = []
        memo: dict = {}
        env: dict = {}

        def step(prim: str, args: tuple):
            key = (prim, args)
            if key not in memo:
                memo[key] = len(steps)
                steps.append(_Step(prim, args))
            return ("step", memo[key])

        def emit(node):
            if isinstance(node, ast.Name):
                if node.id in env:
                    return env[node.id]
                if node.id in self.operands:
                    return ("in", self.operands.index(node.id))
                if node.id in values:
                    return ("num", float(values[node.id]))
                raise ValueError(f"composite '{self.name}': unknown name '{node.id}'")
            if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
                return ("num", float(node.value))
            if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
                prim = _BINOPS[type(node.op)]
                a, b = emit(node.left), emit(node.right)
                if a[0] == b[0] == "num":
                    return ("num", _FOLD[prim](a[1], b[1]))
                return step(prim, (a, b))
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
                a = emit(node.operand)
                return ("num", -a[1]) if a[0] == "num" else step("neg", (a,))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
                args = tuple(emit(a) for a in node.args)
                if all(a[0] == "num" for a in args):
                    raise ValueError(
                        f"composite '{self.name}': {node.func.id}() of numbers only; write "
                        "the number"
                    )
                return step(node.func.id, args)
            raise ValueError(
                f"composite '{self.name}': {ast.unparse(node)!r} is not an operand, parameter, "
                "number, + - * /, or a call of an elementwise primitive"
            )

        for name, node in self.lets:
            env[name] = emit(node)
        out = emit(self.result)
        if out[0] != "step":
            raise ValueError(f"composite '{self.name}': the result must compute something")
        if out[1] != len(steps) - 1:
            raise ValueError(f"composite '{self.name}': a bound name is never used by the result")
        return steps

    def prims(self) -> set:
        return {s.prim for s in self.plan(dict.fromkeys(self.params, 0.5))}


def _fake(op, prim: str, raws: list, result: str):
    """The item of one step, for its primitive's own callbacks: ``{prim: raw(s), as: result}``."""
    arg = raws[0] if len(raws) == 1 else list(raws)
    return replace(op, prim=prim, args=((prim, arg),), results=(result,))


def composite(
    name: str,
    body: str,
    summary: str,
    example: str,
    params: dict | None = None,
    operands: tuple = ("x",),
    siblings=(),
    check=None,
    version: int = 1,
) -> Primitive:
    """A primitive computing ``body`` (module docstring). ``params``: parameter -> JSON Schema
    fragment, all required; ``operands``: the body's operand names, one (the item's value) or
    several (the item's list, in order); ``siblings``: primitives of the same operands to swap in
    as mutants (besides each parameter moved, ``base.moved``); ``check(values)``: raises an
    ``ItemError`` for parameters the schema cannot refuse."""
    params = dict(params or {})
    parsed = _Body(name, body, tuple(operands), tuple(params))
    many = len(operands) > 1

    def values(op) -> dict:
        return {k: float(op.get(k)) for k in params if op.get(k) is not None}

    def raws(op) -> list:
        raw = op.get(name)
        return list(raw) if many else [raw]

    def walk(op, leaves: list, apply):
        """Run the planned steps: ``apply(step, prim, args, last) -> result`` with ``args`` the
        leaves' and earlier results' values (numbers as floats)."""
        done: list = []
        steps = parsed.plan(values(op))
        for i, s in enumerate(steps):
            args = [
                leaves[ref] if kind == "in" else done[ref] if kind == "step" else ref
                for kind, ref in s.args
            ]
            done.append(apply(s, _prim(s.prim), args, i == len(steps) - 1))
        return done[-1]

    def infer(tc, op, ins, tensors):
        if check is not None:
            check(values(op))
        leaves = list(ins[name]) if many else [ins[name]]

        def apply(s, p, args, last):
            types = [VType("scalar") if isinstance(a, float) else a for a in args]
            keyed = types[0] if len(types) == 1 else types
            names = [a if isinstance(a, float) else f"_{j}" for j, a in enumerate(args)]
            return p.infer(tc, _fake(op, s.prim, names, "_"), {s.prim: keyed}, {})[0]

        return (walk(op, leaves, apply),)

    def reference(rt, op, ins, tensors):
        leaves = list(ins[name]) if many else [ins[name]]

        def apply(s, p, args, last):
            keyed = args[0] if len(args) == 1 else list(args)
            names = [a if isinstance(a, float) else f"_{j}" for j, a in enumerate(args)]
            return p.reference(rt, _fake(op, s.prim, names, "_"), {s.prim: keyed}, {})[0]

        return (walk(op, leaves, apply),)

    def emit(ctx, op, which: str):
        """CuTe (``which="lower"``, a ``LowerCtx``) or Triton (``"host"``, a ``HostCtx``) text:
        each step by its primitive, the last binding the item's result."""
        result = op.results[0]

        def apply(s, p, args, last):
            out = result if last else ctx.fresh(f"{ctx.ident(result)}_{s.prim}")
            if which == "host" and not last:  # a host value's lanes follow its type
                types = [VType("scalar") if isinstance(a, float) else ctx.value_type(a)
                         for a in args]  # fmt: skip
                ctx.declare(out, broadcast(types, f"'{name}'"))
            getattr(p, which)(ctx, _fake(op, s.prim, args, out))
            return out

        walk(op, raws(op), apply)

    def all_mutants(op):
        shifted = tuple(op.with_arg(k, moved(v)) for k, v in values(op).items())
        swapped = tuple(
            replace(op, prim=s, args=((s, op.get(name)),)) for s in siblings if s != name
        )
        return shifted + swapped

    used = parsed.prims()
    prims = {u: _prim(u) for u in used}
    unknown = sorted(u for u, p in prims.items() if p is None or p.family != ELEMENTWISE)
    if unknown:
        raise ValueError(f"composite '{name}': {unknown} are not elementwise primitives")
    no_lower = sorted(u for u in used if prims[u].lower is None)
    no_host = sorted(u for u in used if prims[u].host is None)
    no_mode = {}
    for u in sorted(used):
        no_mode.update(prims[u].no_mode)

    def supports(config, sizes, op):
        return next(
            (why for p in prims.values() if (why := p.supports(config, sizes, op)) is not None),
            None,
        )

    value = {"type": "array", "items": OPERAND, "minItems": len(operands),
             "maxItems": len(operands)} if many else VALUE_REF  # fmt: skip
    return ranged(
        Primitive(
            name=name,
            family=ELEMENTWISE,
            summary=summary,
            example=example,
            schema=item_schema(name, value, params, required=tuple(params)),
            operands=(name,),
            infer=infer,
            reference=reference,
            mutants=all_mutants,
            supports=supports,
            lower=None if no_lower else (lambda lc, op: emit(lc, op, "lower")),
            host=None if no_host else (lambda hc, op: emit(hc, op, "host")),
            no_host=f"it is computed with {', '.join(no_host)}, which has no host lowering"
            if no_host
            else "",
            no_mode=no_mode,
            version=version,
        )
    )


def _prim(name: str) -> Primitive | None:
    """The registered primitive ``name``, imported directly (a composite is built while the
    registry imports it: asking the registry here would import the composite again)."""
    try:
        module = importlib.import_module(f"coda_spec.primitives.{name}")
    except ModuleNotFoundError:
        return None
    return getattr(module, "PRIMITIVE", None)
