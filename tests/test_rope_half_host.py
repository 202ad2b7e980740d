"""Rotate-half RoPE (``pairs: half``, Hugging Face's layout) in host steps.

``tests/specs_extra/rope_half_host.yaml`` (a forward rotation of q and k heads, v passed through,
and the backward rotation of a gradient, each a host step) is proven by ``coda check --math``
with every mutant killed, and both its kernels run under Triton's interpreter equal to the
reference at a chunk whose last one is masked and at the default chunk. A body whose narrowest
value makes the rotated tile 4 lanes (the frequencies 2) runs too. The refusals that remain are
located: a head size that is not a power of two (Triton's shapes) and a chunk smaller than one
head. (GEMM epilogues lower rotate-half too: tests/test_rope_half_kernel.py.)
"""

from __future__ import annotations

import os

import pytest

from coda_spec.check.frontend import check_file
from coda_spec.errors import EXIT_OK, SpecError, render_text
from coda_spec.lower.host_kernel import HostKernelError, host_kernel
from coda_spec.lower.triton_aot import compile_kernel
from coda_spec.primitives import registry
from tests.conftest import ROOT, checked_text, invoke, needs_triton
from tests.test_host_kernel import TOLERANCE, interpret_all

SPEC = ROOT / "tests" / "specs_extra" / "rope_half_host.yaml"
REL = str(SPEC.relative_to(ROOT))

# A body whose narrowest per-column value is W/4 wide (swiglu of swiglu), so the slot is a
# quarter of the rotated tile: 4 lanes of x, 2 of the frequencies. W = 80: 20 slots, chunks of 8.
QUARTER = """coda: 1
name: rope_half_quarter
dims: {M: dynamic, W: 80, head_dim: 16}
tensors:
  x:        {shape: [M, W], dtype: fp32}
  pos:      {shape: [M], dtype: int32, range: [0, 4096]}
  inv_freq: {shape: ["head_dim/2"], dtype: fp32, range: [0, 1]}
steps:
  - host: quarter
    over: x
    body:
      - {load_tile: x}
      - {load_col: pos}
      - {load_row: inv_freq, repeat: W/head_dim}
      - {rope: x, pos: pos, freqs: inv_freq, pairs: half, head_dim: head_dim, as: r}
      - {swiglu: r, as: s}
      - {swiglu: s, as: t}
      - {store: r}
      - {store: t}
outputs: {r: fp32, t: fp32}
"""

HOST = """coda: 1
name: t
dims: {{M: dynamic, W: {w}, head_dim: {hd}}}
tensors:
  x: {{shape: [M, W], dtype: bf16}}
  pos: {{shape: [M], dtype: int32, range: [0, 64]}}
  inv_freq: {{shape: ["head_dim/2"], dtype: fp32}}
steps:
  - host: h
    over: x
    body:
      - {{load_tile: x}}
      - {{load_col: pos}}
      - {{load_row: inv_freq, repeat: W/head_dim}}
      - {{rope: x, pos: pos, freqs: inv_freq, pairs: half, head_dim: head_dim, as: y}}
      - {{store: y}}
outputs: {{y: bf16}}
"""

pytestmark = pytest.mark.usefixtures("at_root")  # spec paths in generated comments: relative


def test_rope_half_host_is_proven_by_check_math():
    res = invoke("check", "--math", SPEC)
    assert res.exit_code == EXIT_OK, res.output
    assert "2/2 forward outputs equal equivalent_to" in res.output


def test_every_rope_half_host_mutant_is_caught():
    pytest.importorskip("torch")
    from tests.algebra import mutation_report, sizes_of, small

    checked = small(check_file(SPEC))
    killed, total, survivors = mutation_report(checked, sizes_of(checked))
    # per rope item: its sibling, its adjacent-pairs twin, its range dropped and shrunk
    assert survivors == [] and killed == total >= 8


def test_the_kernel_rotates_whole_heads_per_chunk():
    kernel = host_kernel(check_file(SPEC), "rotate", block=16)
    src = kernel.source
    heads = "tl.reshape(tl.join(qkv_0, qkv_1), [2 * BLOCK]), [2 * BLOCK // 16, 2, 8]), (0, 2, 1))"
    assert heads in src  # the chunk as [heads, hd/2, 2]: the halves of each head as a pair
    assert "pos * tl.reshape(inv_freq, [2 * BLOCK // 16, 8])" in src
    assert "tl.load(inv_freq_ptr + (slot) % 8" in src  # one head's inv_freq, read repeated
    back = host_kernel(check_file(SPEC), "rotate_back").source
    assert "dx_all_a * dx_all_cos + dx_all_b * dx_all_sin" in back  # by -theta


def _assert_equal_to_reference(result) -> None:
    import torch

    assert "error" not in result, result.get("error")
    assert result["kernel"], "the kernel writes nothing"
    for name, got in result["kernel"].items():
        dtype = result["dtypes"][name]
        want = result["reference"][name].to(got.dtype)
        rtol, atol = TOLERANCE[dtype]
        torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol, msg=name)
        if dtype != "fp32":
            same = (got.float() == want.float()).float().mean().item()
            assert same >= 0.99, f"{name}: only {same:.1%} of elements equal after rounding"


@pytest.mark.slow
@needs_triton
def test_kernels_match_the_reference_under_the_interpreter(tmp_path):
    import torch

    quarter = tmp_path / "rope_half_quarter.yaml"
    quarter.write_text(QUARTER)
    cases = {
        f"{step}-{block}": {"spec": REL, "step": step, "rows": 6, "block": block}
        for step in ("rotate", "rotate_back")
        for block in (16, None)  # 40 slots: chunks of 16 (the last one masked), the default
    }
    cases["quarter"] = {"spec": str(quarter), "step": "quarter", "rows": 5, "block": 8}
    results = interpret_all(cases, tmp_path)
    for case, result in results.items():
        _assert_equal_to_reference(result)
        if case.startswith("rotate"):
            # v (columns Q+KV = 64 onwards) passes through; q and k are rotated
            written = next(iter(result["kernel"].values())).float()
            read = next(v for k, v in result["reads"].items() if k in ("qkv", "dqkv")).float()
            assert torch.equal(written[:, 64:], read[:, 64:]), case
            assert not torch.allclose(written[:, :64], read[:, :64]), case
    # the layout is rotate-half: a pair is (i, i + 8) of each head, not (2i, 2i + 1)
    r = results["quarter"]["kernel"]["r"]
    x = results["quarter"]["reads"]["x"]
    assert torch.allclose(r.norm(dim=-1), x.norm(dim=-1), rtol=1e-5)
    pair_norm = _heads(r).pow(2).sum(2)  # a_j^2 + b_j^2 per (row, head, j)
    assert torch.allclose(pair_norm, _heads(x).pow(2).sum(2), rtol=1e-4, atol=1e-5)


def _heads(v):
    """[rows, W] -> [rows, heads, 2, hd/2] (hd = 16): the two halves of each head."""
    return v.reshape(v.shape[0], -1, 2, 8)


@pytest.mark.slow
@needs_triton
def test_rope_half_kernels_compile(tmp_path):
    """Both steps compile to sm_90a cubins (the permutes and reshapes are register shuffles
    Triton lowers for Hopper), at the default chunk and the test's masked one."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1 replaces the compiler")
    checked = check_file(SPEC)
    for step in ("rotate", "rotate_back"):
        for block in (None, 16):
            kernel = host_kernel(checked, step, block=block)
            entry = compile_kernel(kernel, tmp_path / f"{step}-{block}")
            cubin = tmp_path / f"{step}-{block}" / entry["cubin"]
            assert cubin.read_bytes()[:4] == b"\x7fELF" and entry["hidden"] <= 2


def _errors(text: str) -> str:
    with pytest.raises(SpecError) as e:
        checked_text(text, "t.yaml")
    return "\n".join(render_text(d, None) for d in e.value.diagnostics)


def test_a_head_dim_not_a_power_of_two_is_refused_at_head_dim():
    out = _errors(HOST.format(w=96, hd=24))
    assert "t.yaml:15:" in out and "body[3].head_dim" in out
    assert "head_dim 24 does not lower in a host step" in out and "powers of two" in out
    assert "coda_spec/nn/layout.py" in out  # the fix: adjacent pairs and permuted weights


def test_a_chunk_smaller_than_a_head_is_a_located_error():
    checked = checked_text(HOST.format(w=128, hd=64), "t.yaml")
    host_kernel(checked, "h", block=32)  # 64 columns per chunk: one head
    with pytest.raises(HostKernelError) as e:
        host_kernel(checked, "h", block=16)
    msg = str(e.value)
    assert msg.startswith("t.yaml:15: host step 'h': 'rope' (line 15)")
    assert "holds 32 columns of 'x', not a multiple of head_dim 64" in msg
    assert "a block of at least 32 slots" in msg


def test_a_host_kernel_bakes_head_dim():
    checked = check_file(SPEC)
    [step] = [s for s in checked.spec.all_steps() if s.name == "rotate"]
    rope = next(op for op in step.body if op.prim == "rope")
    assert "head_dim" in registry()["rope"].bakes(rope, "host")
    text = HOST.format(w=64, hd=16).replace("pairs: half, head_dim: head_dim, ", "")
    adjacent = checked_text(text, "t.yaml")
    [h] = [s for s in adjacent.spec.all_steps() if s.name == "h"]
    assert registry()["rope"].bakes(next(op for op in h.body if op.prim == "rope"), "host") == ()
