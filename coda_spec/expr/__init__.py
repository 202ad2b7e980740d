"""The equivalence language: ``equivalent_to`` programs and ``derive`` expressions.

``equivalent_to`` states the UNFUSED math a chain replaces, with standard ops only, as a few
Python-syntax assignments::

    equivalent_to: |
      x1 = x + y @ w_o.T
      out = rms_norm(x1, gamma, 1e-6) @ w_up.T

Every assigned name that is also a chain output is compared with the spec's own math; other names
are temporaries. Free names must be chain inputs (or dims, which read as integers), never the
chain's intermediates, so the equivalence cannot restate the fused steps. ``vjp(y, x, dy)`` is the
vector-Jacobian product (torch.autograd) of ``y`` with respect to the input ``x``: backward specs
state their gradients this way, so they are checked against autograd, not against a hand-derived
formula. ``derive`` (on a tensor) is one expression in the same language that makes an input
consistent with others, e.g. ``rsqrt(mean(square(x), -1) + 1e-6)`` for a saved rstd.

The parser and checker here import nothing heavy (``coda check`` must not import torch); the torch
implementations of the whitelisted functions are built only when a program is evaluated.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from coda_spec.errors import did_you_mean

FUNCTIONS = {
    "matmul": "matrix product (same as @)",
    "rms_norm": "rms_norm(x, weight, eps): x * rsqrt(mean(x^2, -1) + eps) * weight",
    "layer_norm": "layer_norm(x, weight, bias, eps): (x - mean) * rsqrt(var + eps) * weight + "
    "bias over the last dim (weight, bias may be None)",
    "var": "var(x, dim): the population variance, mean((x - mean(x))^2) (torch's correction=0)",
    "silu": "x * sigmoid(x)",
    "sigmoid": "logistic",
    "relu": "max(x, 0)",
    "leaky_relu": "leaky_relu(x, negative_slope): x above 0, negative_slope * x below",
    "gelu": "gelu(x, approximate='tanh'|'none'); default 'none' as in torch",
    "tanh": "",
    "exp": "",
    "erf": "the error function",
    "log": "",
    "sqrt": "",
    "rsqrt": "",
    "square": "",
    "abs": "",
    "cos": "",
    "sin": "",
    "softmax": "softmax(x, dim)",
    "log_softmax": "log_softmax(x, dim)",
    "logsumexp": "logsumexp(x, dim)",
    "sum": "sum(x, dim)",
    "mean": "mean(x, dim)",
    "amax": "amax(x, dim)",
    "where": "where(cond, a, b)",
    "stack": "stack([a, b], dim)",
    "cat": "cat([a, b], dim)",
    "gather": "gather(x, dim, index)",
    "clamp": "clamp(x, min=, max=)",
    "one_hot": "one_hot(index, num_classes)",
    "arange": "arange(n): 0, 1, ..., n - 1 (e.g. column indices, arange(V))",
    "cross_entropy": "cross_entropy(logits, target, ignore_index=-100, reduction='none')",
    "apply_rotary_emb": "Llama's interleaved RoPE: x pairs as complex numbers times "
    "exp(i * theta), theta of shape [rows, W/2]",
    "apply_rotary_pos_emb": "Hugging Face's rotate-half RoPE over the last dim (one head, hd "
    "wide): x * cat(cos, cos) + rotate_half(x) * cat(sin, sin), theta [..., hd/2]",
    "vjp": "vjp(y, x, dy): vector-Jacobian product dy^T dy/dx by torch.autograd",
    "philox_uniform": "philox_uniform(seed, offset, M, N): [M, N] Philox4x32-10 uniforms in "
    "[0, 1), element (m, n) keyed by counter offset + m*N + n (the philox primitive's numbers)",
    "dropout": "dropout(x, p, seed, offset): x * (u >= p) / (1 - p), u = philox_uniform(seed, "
    "offset, rows, cols) of the 2-D x; the mask is a constant to vjp",
    "bf16": "bf16(x): x rounded to bfloat16 (nearest even), as a cast to bf16 rounds",
    "fp16": "fp16(x): x rounded to float16 (nearest even)",
    "fp8_e4m3": "fp8_e4m3(x): x rounded to fp8 e4m3 (nearest even), saturating at +-448",
    "fp8_e5m2": "fp8_e5m2(x): x rounded to fp8 e5m2 (nearest even), saturating at +-57344",
}
ROUNDINGS = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2")  # the functions that round (dtype names)
# torch's spellings of a rounding, as a method (x.bfloat16()) or a function (bfloat16(x))
TORCH_ROUNDINGS = {
    "bfloat16": "bf16",
    "half": "fp16",
    "float16": "fp16",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
    "to": "bf16",
}
# where a function takes a dim (an integer): the positional index of the dim argument
DIM_ARGS = {
    **dict.fromkeys(("sum", "mean", "amax", "var", "softmax", "log_softmax"), 1),
    **dict.fromkeys(("logsumexp", "stack", "cat", "gather"), 1),
}
METHODS = ("flatten", "reshape", "unsqueeze", "sum", "mean", "amax", "abs")
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.MatMult, ast.Pow)
_CMPOPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
MAX_DEPTH = 100  # syntax-tree depth; real programs stay below 20


class ExprError(ValueError):
    """A located problem in a program: ``line``/``col`` are 1-based within the program text;
    ``path``: the spec path of the program (``("equivalent_to",)``, ``tensors.x.derive``) once
    a caller that knows it has set it (:meth:`at`), else ``()``."""

    def __init__(self, message: str, line: int = 1, col: int = 1, hint: str = "", path=()):
        super().__init__(message)
        self.message, self.line, self.col, self.hint = message, line, col, hint
        self.path = tuple(path)

    def at(self, path) -> ExprError:
        """The same problem, in the program at spec path ``path``."""
        return ExprError(self.message, self.line, self.col, self.hint, path)


@dataclass(frozen=True)
class Program:
    text: str
    statements: tuple  # ((target or None, ast.expr), ...)

    @property
    def targets(self) -> tuple:
        return tuple(t for t, _ in self.statements if t)


def parse(text: str, single_expression: bool = False) -> Program:
    """Parse and syntax-check a program (or one expression). Raises ExprError."""
    try:
        tree = ast.parse(text, mode="eval" if single_expression else "exec")
    except SyntaxError as e:
        raise ExprError(f"syntax error: {e.msg}", e.lineno or 1, e.offset or 1) from e
    except ValueError as e:  # NUL bytes on Python 3.10
        raise ExprError(f"syntax error: {e}", 1, 1) from e
    except (RecursionError, MemoryError) as e:  # nesting that overflows Python's parser
        raise ExprError("expression nested too deeply to parse", 1, 1, "simplify it") from e
    if too_deep(tree):
        raise ExprError(f"expression nested more than {MAX_DEPTH} levels deep", 1, 1, "simplify it")
    if single_expression:
        return Program(text, ((None, tree.body),))
    stmts = []
    for s in tree.body:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            stmts.append((s.targets[0].id, s.value))
        else:
            raise ExprError("each line must be 'name = expression'", s.lineno, s.col_offset + 1)
    if not stmts:
        raise ExprError("empty program", 1, 1, "write at least one 'output = expression' line")
    return Program(text, tuple(stmts))


def too_deep(tree: ast.AST, limit: int = MAX_DEPTH) -> bool:
    """True when ``tree`` nests deeper than ``limit`` (evaluators recurse on it). Iterative."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return False


def check(prog: Program, inputs: set, dims: set) -> list[ExprError]:
    """Names, functions and node kinds; returns every problem found."""
    problems: list[ExprError] = []
    defined: set = set()
    for target, node in prog.statements:
        _check_node(node, inputs, dims, defined, problems)
        if target:
            if target in inputs:
                problems.append(
                    ExprError(f"'{target}' is a chain input; assign a new name", node.lineno, 1)
                )
            defined.add(target)
    return problems


def _check_node(node, inputs, dims, defined, problems):
    def bad(n, msg, hint=""):
        problems.append(
            ExprError(msg, getattr(n, "lineno", 1), getattr(n, "col_offset", 0) + 1, hint)
        )

    called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    values = inputs | dims | defined
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in FUNCTIONS and n.id not in values:
            if id(n) not in called:
                bad(n, f"'{n.id}' is a function, not a value", f"call it: {n.id}(...)")
        elif isinstance(n, ast.Slice):
            _check_slice(n, bad)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            if (
                n.id not in inputs
                and n.id not in dims
                and n.id not in defined
                and (n.id not in FUNCTIONS)
            ):
                bad(
                    n,
                    f"unknown name '{n.id}'",
                    did_you_mean(n.id, inputs | dims | defined)
                    or "equivalent_to may read only chain inputs, dims and its own names",
                )
        elif isinstance(n, ast.Call):
            if isinstance(n.func, ast.Name):
                if n.func.id not in FUNCTIONS:
                    hint = _rounding_hint(n.func.id) or did_you_mean(n.func.id, FUNCTIONS)
                    bad(n, f"unknown function '{n.func.id}'", hint)
                elif n.func.id == "vjp" and (
                    len(n.args) != 3
                    or not isinstance(n.args[1], ast.Name)
                    or n.args[1].id not in inputs
                ):
                    bad(n, "vjp(y, x, dy) needs x to be a chain input name")
                elif n.func.id in DIM_ARGS:
                    _check_dim(n, DIM_ARGS[n.func.id], bad)
            elif isinstance(n.func, ast.Attribute):
                if n.func.attr in ("sum", "mean", "amax"):
                    _check_dim(n, 0, bad)
                if n.func.attr not in METHODS:
                    hint = _rounding_hint(n.func.attr) or did_you_mean(n.func.attr, METHODS)
                    bad(n, f"unknown method '.{n.func.attr}()'", hint)
            else:
                bad(n, "only named functions can be called")
        elif isinstance(n, ast.Attribute):
            if n.attr != "T" and n.attr not in METHODS:
                bad(n, f"unknown attribute '.{n.attr}'", "only .T and a few methods are allowed")
        elif isinstance(n, ast.BinOp) and not isinstance(n.op, _BINOPS):
            bad(n, f"operator {type(n.op).__name__} is not allowed")
        elif isinstance(n, ast.Compare) and not all(isinstance(o, _CMPOPS) for o in n.ops):
            bad(n, "comparison operator not allowed")
        elif isinstance(
            n,
            (
                ast.Lambda,
                ast.ListComp,
                ast.DictComp,
                ast.SetComp,
                ast.GeneratorExp,
                ast.NamedExpr,
                ast.Await,
                ast.Yield,
                ast.IfExp,
                ast.Dict,
                ast.Set,
                ast.JoinedStr,
                ast.Starred,
            ),
        ):
            bad(n, f"{type(n).__name__} is not allowed in equivalence programs")


def _constant(node):
    """The number a literal (``2``, ``-1``, ``1.5``) stands for, else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _constant(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return None if isinstance(node.value, bool) else node.value
    return None


def _check_dim(call: ast.Call, index: int, bad) -> None:
    """A literal dim argument (positional ``index`` or ``dim=``) must be an integer."""
    args = list(call.args[index : index + 1]) + [k.value for k in call.keywords if k.arg == "dim"]
    for arg in args:
        v = _constant(arg)
        if v is not None and not isinstance(v, int):
            bad(arg, f"dim {v} is not an integer", "a dim is an integer axis: -1 is the last")


def _check_slice(n: ast.Slice, bad) -> None:
    """Literal slice parts must be integers, and a literal step positive (torch has no
    reversed slices: ``w[::-1]`` fails at evaluation)."""
    for part in (n.lower, n.upper, n.step):
        v = _constant(part) if part is not None else None
        if isinstance(v, float):
            bad(part, f"slice bound {v} is not an integer", "slice with integers: w[0::2]")
    step = _constant(n.step) if n.step is not None else None
    if isinstance(step, int) and step <= 0:
        bad(
            n.step,
            f"slice step {step} is not positive",
            "a step is a positive integer (w[0::2], w[1::2]); tensors cannot be reversed by "
            "slicing",
        )


def _rounding_hint(name: str) -> str:
    """A torch spelling of a rounding (``.bfloat16()``, ``.half()``, ``.to(...)``): the math
    language's function for it."""
    fn = TORCH_ROUNDINGS.get(name)
    if fn is None:
        return ""
    if name == "to":
        return "round with a function: bf16(x), fp16(x), fp8_e4m3(x) or fp8_e5m2(x)"
    return f"did you mean {fn}(x)? a rounding is a function: {fn}(x) rounds x to {fn}"


def free_names(prog: Program) -> set:
    """Names a program reads that it does not define (inputs and dims)."""
    defined, out = set(), set()
    for target, node in prog.statements:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id not in defined and n.id not in FUNCTIONS:
                out.add(n.id)
        if target:
            defined.add(target)
    return out


def uses_vjp(prog: Program) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "vjp"
        for _, node in prog.statements
        for n in ast.walk(node)
    )
