"""Per-head vectors (``load_row`` ``repeat``), column ranges (``cols:``), per-head RoPE
frequencies and rotate-half RoPE (``pairs: half``; in kernels: tests/test_rope_half_kernel.py):
located refusals, the reference against
independent torch math, and the runtime's row tables (issue 22, item 1)."""

from __future__ import annotations

import pytest

from coda_spec.errors import SpecError, render_text
from coda_spec.lower.host_kernel import host_kernel
from tests.conftest import checked_text

torch = pytest.importorskip("torch")

BASE = """coda: 1
name: t
dims: {{M: dynamic, D: 64, F: 128, head_dim: 32}}
tensors:
  h: {{shape: [M, D], dtype: bf16}}
  w: {{shape: [F, D], dtype: bf16}}
  g: {{shape: [head_dim], dtype: fp32}}
  inv_freq: {{shape: ["head_dim/2"], dtype: fp32}}
  pos: {{shape: [M], dtype: int32, range: [0, 64]}}
steps:
  - kernel: k
    gemm: {{a: h, b: w.T}}
    epilogue:
{items}
outputs: {{y: bf16}}
"""


def refusal(items: str) -> str:
    with pytest.raises(SpecError) as e:
        checked_text(BASE.format(items=items), "t.yaml")
    return "\n".join(render_text(d, None) for d in e.value.diagnostics)


def test_repeat_must_fill_the_tile_and_says_how_wide_it_is():
    out = refusal(
        "      - {load_row: g, repeat: 2}\n      - {mul: [acc, g], as: y}\n      - {store: y}"
    )
    assert "a row vector needs one value per column: it has 64 values" in out


def test_cols_out_of_bounds_is_refused_at_cols():
    out = refusal(
        "      - {load_row: g, repeat: 4}\n"
        "      - {mul: [acc, g], cols: [0, 256], as: y}\n      - {store: y}"
    )
    assert "t.yaml:15:" in out and "epilogue[1].cols" in out
    assert "[0, 256) is not a non-empty range of the step's 128 columns" in out


def test_cols_needs_the_tile_first():
    out = refusal(
        "      - {load_row: g, repeat: 4}\n"
        "      - {mul: [g, acc], cols: [0, 64], as: y}\n      - {store: y}"
    )
    assert "outside the range the result is the first operand, 'g'" in out


def test_cols_that_do_not_fold_are_refused():
    out = refusal("      - {mul: [acc, 2.0], cols: [0, X], as: y}\n      - {store: y}")
    assert "cols: unknown dim 'X'" in out


def test_odd_bounds_are_refused_in_a_pair_kernel():
    out = refusal(
        "      - {load_col: pos}\n      - {load_row: inv_freq, repeat: 4}\n"
        "      - {mul: [acc, 2.0], cols: [0, 33], as: a}\n"
        "      - {rope: a, pos: pos, freqs: inv_freq, as: y}\n      - {store: y}"
    )
    assert "splits a column pair of this acc_pair kernel" in out


def test_rope_half_in_a_kernel_refuses_a_statistic_upstream_at_the_item():
    """The partner is read through the accumulator prepass, which re-computes the rotated
    value: one that reads a prepass statistic (here the norm's rstd) cannot be (the fix: scale
    after the rotation). The same item on acc alone checks; heads of 32 columns do not (the
    default config's 32-column epilogue subtiles straddle half a head)."""
    rope = (
        "      - {load_col: pos}\n      - {load_row: inv_freq, repeat: 2}\n"
        "      - {rope: X, pos: pos, freqs: inv_freq, pairs: half, head_dim: head_dim, "
        "as: y}\n      - {store: y}"
    )
    norm = (
        "      - {prepass: meansq, of: acc, group: head_dim, as: ms}\n"
        "      - {rsqrt: ms, as: r}\n      - {mul: [acc, r], as: xn}\n"
    )
    wide = BASE.replace("head_dim: 32", "head_dim: 64")
    with pytest.raises(SpecError) as e:
        checked_text(wide.format(items=norm + rope.replace("X", "xn")), "t.yaml")
    out = "\n".join(render_text(d, None) for d in e.value.diagnostics)
    assert "t.yaml:19:" in out and "epilogue[5]: cannot lower 'rope'" in out
    assert "'ms' is itself a prepass statistic" in out
    checked_text(wide.format(items=rope.replace("X", "acc")), "t.yaml")
    out = refusal(rope.replace("X", "acc").replace("repeat: 2", "repeat: 4"))
    assert "its 32 columns do not divide head_dim / 2 = 16" in out


def test_rope_half_lowers_in_a_host_step():
    """The same item in a host step checks (tests/test_rope_half_host.py runs its kernel)."""
    text = BASE.replace(
        "  - kernel: k\n    gemm: {{a: h, b: w.T}}\n    epilogue:",
        "  - host: k\n    over: h\n    body:",
    )
    items = (
        "      - {load_tile: h}\n      - {load_col: pos}\n      - {load_row: inv_freq, repeat: 2}\n"
        "      - {rope: h, pos: pos, freqs: inv_freq, pairs: half, head_dim: head_dim, as: y}\n"
        "      - {store: y}"
    )
    checked = checked_text(text.format(items=items), "t.yaml")
    assert "tl.permute(" in host_kernel(checked, "k").source


def test_rope_half_needs_head_dim():
    out = refusal(
        "      - {load_col: pos}\n      - {load_row: inv_freq, repeat: 4}\n"
        "      - {rope: acc, pos: pos, freqs: inv_freq, pairs: half, as: y}\n      - {store: y}"
    )
    assert "needs the head size" in out


def test_rotate_half_reference_matches_transformers_formula():
    """The reference's rotate-half RoPE against Hugging Face's ``apply_rotary_pos_emb`` written
    out (``x * cos + rotate_half(x) * sin``, cos/sin of ``cat(freqs, freqs)``)."""
    from coda_spec.expr.evaluate import FUNCS
    from coda_spec.primitives._pairs import rotate

    class Rt:
        pass

    rt = Rt()
    rt.torch = torch
    g = torch.Generator().manual_seed(0)
    m, hd, heads = 5, 16, 3
    x = torch.randn(m, heads * hd, generator=g, dtype=torch.float64)
    pos = torch.arange(m, dtype=torch.float64).reshape(m, 1) * 7
    inv = torch.rand(hd // 2, generator=g, dtype=torch.float64)
    got = rotate(rt, x, pos, inv.repeat(heads).reshape(1, -1), 1.0, hd)
    emb = torch.cat([inv, inv]) * pos.reshape(m, 1, 1)  # [m, 1, hd]
    xh = x.reshape(m, heads, hd)
    rot_half = torch.cat([-xh[..., hd // 2 :], xh[..., : hd // 2]], -1)
    want = (xh * emb.cos() + rot_half * emb.sin()).reshape(m, -1)
    assert torch.allclose(got, want, atol=1e-12)
    math = FUNCS["apply_rotary_pos_emb"](xh, pos.reshape(m, 1, 1) * inv)
    assert torch.allclose(math.reshape(m, -1), want, atol=1e-12)
    back = rotate(rt, got, pos, inv.repeat(heads).reshape(1, -1), -1.0, hd)
    assert torch.allclose(back, x, atol=1e-12)  # rope_bwd's rotation undoes it


def test_row_table_repeats_and_composes_with_turns():
    from coda_spec.runtime import launch

    v = torch.arange(4, dtype=torch.float32)
    assert torch.equal(launch.row_table(v, "repeat", 12), v.repeat(3).reshape(1, 12))
    want = launch.turns_table(v.repeat(3))
    assert torch.equal(launch.row_table(v, "repeat+turns_table", 24), want)
    with pytest.raises(launch.CodaRuntimeError):
        launch.row_table(v, "repeat", 10)
