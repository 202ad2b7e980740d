"""What the catalogue's eager and Liger baselines share: the catalogue's constants and the
small torch helpers (upcast statistics, RMS, RoPE tables and rotation)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

EPS = 1e-6  # the catalogue norms' epsilon
LLAMA3_EPS = 1e-5  # Llama-3's rms_norm_eps (the llama3_* specs)
QWEN_EPS = 1e-6  # Qwen2(.5) and Qwen3 checkpoints' rms_norm_eps (the qwen2_*, qwen3_* specs)
GEMMA_EPS = 1e-6  # Gemma-3 checkpoints' rms_norm_eps (specs/gemma3_ffn.yaml)
IGNORE = -100  # the catalogue's ignore_index


def upcast(x: torch.Tensor) -> torch.Tensor:
    """Reductions and statistics in fp32 (HF's ``.float()``); fp64 stays fp64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def rms(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), None, EPS)


def rstd(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    return torch.rsqrt(upcast(x).square().mean(-1) + eps)


def rope_tables(t: dict, sizes: dict) -> dict:
    """prepare: cos/sin of theta = pos * freqs (one per token and rotary pair), built once."""
    with torch.no_grad():
        theta = t["pos"][:, None] * t["freqs"][None, :]
        return {**t, "_cos": theta.cos(), "_sin": theta.sin()}


def rope(x: torch.Tensor, cos, sin, inverse: bool = False) -> torch.Tensor:
    """Rotate adjacent pairs (a, b) = (x[2i], x[2i+1]) by theta: (a cos - b sin, a sin + b cos)
    (Llama's interleaved convention); ``inverse`` rotates by -theta, the transpose."""
    pairs = upcast(x).unflatten(-1, (-1, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    if inverse:
        out = (a * cos + b * sin, b * cos - a * sin)
    else:
        out = (a * cos - b * sin, a * sin + b * cos)
    return torch.stack(out, -1).flatten(-2).to(x.dtype)
