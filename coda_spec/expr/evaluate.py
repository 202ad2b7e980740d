"""Evaluate equivalence programs (``coda_spec.expr``) with torch.

Only the whitelisted functions exist; the AST is walked node by node (no ``eval``). Standard ops
map to torch's own implementations (``F.rms_norm``, ``F.cross_entropy``, complex-number RoPE as in
Meta's Llama reference), deliberately independent of the primitives' reference math.

A program that the checker (``coda_spec.expr.check``) accepts can still fail to evaluate: shapes
that do not broadcast, a float where torch wants a dim, an index out of range. Every such
failure is raised as an ``ExprError`` at the innermost node that failed (its line and column in
the program), never as torch's own exception, so ``coda check --math`` reports it where it is
written (exit 2), not as an internal error. Running out of memory is not the expression's
fault: ``torch.OutOfMemoryError`` passes through as it is.
"""

from __future__ import annotations

import ast

import torch
import torch.nn.functional as F

from coda_spec import philox
from coda_spec.dtypes import round_to
from coda_spec.expr import ROUNDINGS, ExprError, Program, uses_vjp


def _rms_norm(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, float(eps))


def _layer_norm(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, float(eps))


def _var(x, dim=None):
    return torch.var(x, correction=0) if dim is None else torch.var(x, dim, correction=0)


def _rotary(x, theta):
    """Interleaved pairs rotated by ``theta``, in complex arithmetic: fp64 in the proof; a
    16-bit ``x`` (a bench baseline) rotates in fp32, as PyTorch models do (torch has no complex
    bf16), and comes back in its own dtype."""
    wide = x if x.dtype in (torch.float32, torch.float64) else x.float()
    xc = torch.view_as_complex(wide.reshape(*x.shape[:-1], -1, 2).contiguous())
    rot = torch.polar(torch.ones_like(theta, dtype=wide.dtype), theta.to(wide.dtype))
    return torch.view_as_real(xc * rot).flatten(-2).to(x.dtype)


def _matmul(a, b):
    """``a @ b``; fp8 operands (a bench baseline's inputs: torch has no fp8 ``@``) multiply as
    an eager user would: ``torch._scaled_mm`` on the GPU (unit scales, fp32 out, the same
    tensor-core path), else upcast to fp32. The proof's inputs are fp64 already."""
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    if a.dtype not in fp8 and b.dtype not in fp8:
        return a @ b
    if a.is_cuda and a.dim() == b.dim() == 2 and a.dtype in fp8 and b.dtype in fp8:
        one = torch.ones((), device=a.device)
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.float32)
    return a.float() @ b.float()


def _rotary_half(x, theta):
    """Hugging Face's ``apply_rotary_pos_emb`` on one head's last dim: pairs (i, i + hd/2),
    ``x * cos + rotate_half(x) * sin`` with cos/sin of ``theta`` repeated over both halves."""
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    c, s = torch.cos(theta), torch.sin(theta)
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def _vjp(y, x, dy):
    (g,) = torch.autograd.grad(y, x, dy, retain_graph=True, allow_unused=True)
    return torch.zeros_like(x) if g is None else g


def _cross_entropy(logits, target, ignore_index=-100, reduction="none"):
    return F.cross_entropy(logits, target.long(), ignore_index=ignore_index, reduction=reduction)


def _rounding(name: str):
    """``bf16(x)`` and its siblings: ``x`` rounded to the format, returned in ``x``'s dtype
    (fp64 in the proof). Its derivative is taken as 1 (straight-through), so a gradient
    through a rounded value is the gradient at the rounded point."""

    def rnd(x):
        x = x if isinstance(x, torch.Tensor) else torch.tensor(float(x), dtype=torch.float64)
        r = round_to(x.detach(), name)
        return x + (r - x).detach() if x.requires_grad else r

    return rnd


def _philox_uniform(seed, offset, m, n):
    """The philox primitive's uniforms (``coda_spec.philox``, bit for bit), fp64 [m, n]."""
    device = seed.device if hasattr(seed, "device") else None
    s, o = philox.scalar_int(seed), philox.scalar_int(offset)
    return philox.uniform(s, o, int(m), int(n), device=device)


def _dropout(x, p, seed, offset):
    """Inverted dropout with the philox mask, a constant (no gradient flows into it)."""
    u = _philox_uniform(seed, offset, x.shape[0], x.shape[1]).to(x.device)
    keep = (u >= float(p)).to(x.dtype)
    return x * keep / (1.0 - float(p))


def _sum(x, dim=None):
    return x.sum() if dim is None else x.sum(dim)


FUNCS = {
    "matmul": lambda a, b: _matmul(a, b),
    "rms_norm": _rms_norm,
    "layer_norm": _layer_norm,
    "var": _var,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "leaky_relu": F.leaky_relu,
    "gelu": F.gelu,
    "tanh": torch.tanh,
    "exp": torch.exp,
    "erf": torch.erf,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "square": torch.square,
    "abs": torch.abs,
    "cos": torch.cos,
    "sin": torch.sin,
    "softmax": torch.softmax,
    "log_softmax": torch.log_softmax,
    "logsumexp": torch.logsumexp,
    "sum": _sum,
    "mean": torch.mean,
    "amax": torch.amax,
    "where": torch.where,
    "stack": torch.stack,
    "cat": torch.cat,
    "gather": lambda x, d, i: torch.gather(x, d, i.long()),
    "clamp": torch.clamp,
    "one_hot": lambda i, n: F.one_hot(i.long(), n).double(),
    "arange": None,  # arange(n): evaluated by _ev, on the inputs' device
    "cross_entropy": _cross_entropy,
    "apply_rotary_emb": _rotary,
    "apply_rotary_pos_emb": _rotary_half,
    "vjp": _vjp,
    "philox_uniform": _philox_uniform,
    "dropout": _dropout,
    **{name: _rounding(name) for name in ROUNDINGS},
}

_BIN = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.MatMult: lambda a, b: _matmul(a, b),
    ast.Pow: lambda a, b: a**b,
}
_CMP = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}


def _device(env: dict):
    """The device of the program's tensors (the CPU when it has none)."""
    return next((v.device for v in env.values() if isinstance(v, torch.Tensor)), None)


# what evaluating a well-formed but ill-typed expression raises (torch, Python operators)
_FAILURES = (
    RuntimeError,
    TypeError,
    ValueError,
    IndexError,
    KeyError,
    AttributeError,
    ArithmeticError,
    NotImplementedError,
)


def _ev(node, env):
    """``node``'s value; a failure is an ``ExprError`` located at the innermost failing node."""
    try:
        return _ev_node(node, env)
    except (ExprError, torch.OutOfMemoryError):  # located already; out of memory: not the text
        raise
    except _FAILURES as e:
        what = _first_line(e)
        raise ExprError(
            f"cannot evaluate this expression: {what}",
            getattr(node, "lineno", 1),
            getattr(node, "col_offset", 0) + 1,
            "check its operands' shapes and its arguments (a dim is an integer)",
        ) from e


def _first_line(e: Exception) -> str:
    """The first line of an exception's message, without torch's list of overloads that
    follows 'but expected one of:'."""
    line = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return line.split(", but expected one of")[0].rstrip(":") or type(e).__name__


def _ev_node(node, env):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id] if node.id in env else FUNCS[node.id]
    if isinstance(node, ast.BinOp):
        return _BIN[type(node.op)](_ev(node.left, env), _ev(node.right, env))
    if isinstance(node, ast.UnaryOp):
        v = _ev(node.operand, env)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Compare):
        return _CMP[type(node.ops[0])](_ev(node.left, env), _ev(node.comparators[0], env))
    if isinstance(node, ast.Call):
        args = [_ev(a, env) for a in node.args]
        kwargs = {k.arg: _ev(k.value, env) for k in node.keywords}
        if isinstance(node.func, ast.Attribute):
            return getattr(_ev(node.func.value, env), node.func.attr)(*args, **kwargs)
        if node.func.id == "arange":  # no tensor operand: made where the program's inputs are
            return torch.arange(int(args[0]), dtype=torch.float64, device=_device(env))
        if args and isinstance(args[0], (int, float)) and not isinstance(args[0], bool):
            args[0] = torch.tensor(float(args[0]), dtype=torch.float64)  # sqrt(128.0)
        return FUNCS[node.func.id](*args, **kwargs)
    if isinstance(node, ast.Attribute):  # .T
        return _ev(node.value, env).T
    if isinstance(node, ast.Subscript):
        return _ev(node.value, env)[_ev(node.slice, env)]
    if isinstance(node, ast.Slice):
        return slice(
            *(None if p is None else _ev(p, env) for p in (node.lower, node.upper, node.step))
        )
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_ev(e, env) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    raise ExprError(
        f"cannot evaluate {type(node).__name__}",
        getattr(node, "lineno", 1),
        getattr(node, "col_offset", 0) + 1,
    )


def eval_node(node: ast.expr, env: dict):
    """One statement's value over ``env``, graph kept (``coda bench``'s ``equivalent_to``
    baseline differentiates it; :func:`evaluate` detaches)."""
    return _ev(node, env)


def evaluate(prog: Program, env: dict) -> dict:
    """Run ``prog`` over ``env`` (name -> tensor or int); returns every assigned name."""
    env = dict(env)
    grad = uses_vjp(prog)
    if grad:
        env = {
            k: (
                v.detach().clone().requires_grad_(True)
                if isinstance(v, torch.Tensor) and v.is_floating_point()
                else v
            )
            for k, v in env.items()
        }
    out = {}
    with torch.enable_grad() if grad else torch.no_grad():
        for target, node in prog.statements:
            value = _ev(node, env)
            if target is None:
                return {None: value.detach() if isinstance(value, torch.Tensor) else value}
            env[target] = value
            out[target] = value
    return {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in out.items()}
