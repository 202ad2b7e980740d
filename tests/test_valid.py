"""The `valid` primitive in GEMM epilogues: validation, lowering, the generated text's numbers,
and a kernel that gathers at an index tensor and reads it as a value too.

``valid`` (``coda_spec/primitives/valid.py``) is 1 on rows whose index is not the tensor's
``ignore_index``. In a GEMM epilogue it is one per-row compare of the index (a ``ColVecLoad``,
converted to fp32 by the runtime) with ``ignore_index``, in every pairing mode. Its host
lowering is covered by ``tests/specs_extra/host_gather.yaml`` (tests/test_host_kernel.py).
"""

from __future__ import annotations

import pytest

from coda_spec.check.frontend import check_file
from coda_spec.config import BuildConfig
from coda_spec.errors import EXIT_OK, SpecError
from coda_spec.lower.module import lower_spec
from coda_spec.primitives.lower_api import Field
from tests.conftest import ROOT, checked_text, coda_check, needs_build

TEXT = """\
coda: 1
name: keep
dims: {{M: dynamic, D: 64, V: 256}}
tensors:
  h: {{shape: [M, D], dtype: bf16}}
  w: {{shape: [V, D], dtype: bf16}}
  t: {{shape: [M], dtype: int32, range: [0, V], ignore_index: {ignore}}}
  dl: {{shape: [M], dtype: fp32}}
steps:
  - {kind}: k
    {head}
    {body}:
      - {{valid: t, as: ok}}
      - {{load_col: dl}}
      - {{mul: [dl, ok], as: g}}
      - {{mul: [{x}, g], as: y}}
      - {{store: y}}
outputs: {{y: bf16}}
equivalent_to: |
  y = {product} * where(t == {ignore}, 0.0, dl)[:, None]
"""
KERNEL = {"kind": "kernel", "head": "gemm: {a: h, b: w.T}", "body": "epilogue", "x": "acc"}
KERNEL["product"] = "h @ w.T"


def _text(ignore=-100, **kw) -> str:
    return TEXT.format(ignore=ignore, **{**KERNEL, **kw})


def _kernel(ignore=-100):
    [k] = lower_spec(checked_text(_text(ignore), "keep.yaml"), BuildConfig()).kernels
    return k


def test_lowering_is_one_per_row_compare_with_ignore_index():
    k = _kernel()
    assert '"t": ColVecLoad("t")' in k.decorator
    assert Field("t", "t", "col", (1, "M"), "fp32", "to_fp32") in k.fields
    assert not any(f.role == "columns" for f in k.fields)  # no column table: a per-row value
    body = [ln.strip() for ln in k.body if not ln.strip().startswith("#")]
    assert body[0] == "ok = select(t != -100.0, 1.0, 0.0)"


def test_the_generated_statements_zero_exactly_the_ignored_rows():
    torch = pytest.importorskip("torch")
    from tests.epilogue_fn import run_fn

    idx = torch.tensor([3.0, -100.0, 0.0, 255.0, -100.0, 300.0]).reshape(-1, 1)
    acc = torch.randn(6, 256, generator=torch.Generator().manual_seed(0))
    dl = torch.rand(6, 1, generator=torch.Generator().manual_seed(1)) + 0.5
    out = run_fn(_kernel(), acc, {"t": idx, "dl": dl})
    keep = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0]).reshape(-1, 1)  # out of range: valid
    torch.testing.assert_close(out["D"], acc * (dl * keep), rtol=0, atol=0)


def test_a_kernel_with_valid_is_proven_by_check_math(tmp_path):
    spec = tmp_path / "keep.yaml"
    spec.write_text(_text())
    res = coda_check("--math", spec.name, cwd=tmp_path)
    assert res.exit_code == EXIT_OK, res.output


def test_an_ignore_index_fp32_cannot_hold_exactly_is_refused_in_kernels_only():
    with pytest.raises(SpecError) as e:
        checked_text(_text(ignore=-(2**24)), "keep.yaml")
    [d] = e.value.diagnostics
    assert (d.line, d.message.split(";")[0]) == (13, "valid: 't' has ignore_index -16777216")
    assert "declare a smaller ignore_index" in d.hint
    host = {"kind": "host", "head": "over: x", "body": "body", "x": "x", "product": "x"}
    text = _text(ignore=-(2**24), **host).replace(
        "  dl: {", "  x: {shape: [M, V], dtype: fp32}\n  dl: {"
    )
    text = text.replace("      - {valid: t", "      - {load_tile: x}\n      - {valid: t")
    checked_text(text, "keep.yaml")  # host steps compare integers: any ignore_index


def _f5_with_valid() -> str:
    """F5 (LSE and the gathered target logit) whose kernel also reads target as a value: it
    writes the logits of valid rows, zero on ignored ones."""
    text = (ROOT / "specs" / "f5_norm_lmhead_lse.yaml").read_text()
    gather = "      - {store: target_logit}            # one fp32 per row\n"
    assert gather in text
    text = text.replace(
        gather,
        gather + "      - {valid: target, as: ok}\n      - {mul: [logits, ok], as: kept}\n"
        "      - {store: kept}\n",
    )
    return text.replace("outputs: {lse: fp32,", "outputs: {kept: bf16, lse: fp32,")


def test_a_gathered_index_read_as_a_value_too_gets_two_loads_of_two_names():
    """The gather's index load (an int32 extra op) and the value (an fp32 operand) of one
    tensor: QuACK's op names are the EpilogueArguments fields, so they must differ."""
    [k] = lower_spec(checked_text(_f5_with_valid(), "f5v.yaml"), BuildConfig()).kernels
    names = [f.name for f in k.fields]
    assert len(names) == len(set(names)), names
    by_role = {f.role: f for f in k.fields if f.tensor == "target"}
    assert (by_role["index"].name, by_role["index"].dtype) == ("target_index", "int32")
    assert (by_role["col"].name, by_role["col"].transform) == ("target", "to_fp32")
    assert '_idx_target_index = ColVecLoad("target_index")' in k.globals
    assert "idx_op=_idx_target_index" in k.decorator


def test_f5_alone_keeps_its_index_load_named_after_the_tensor():
    [k] = lower_spec(check_file(ROOT / "specs" / "f5_norm_lmhead_lse.yaml"), BuildConfig()).kernels
    assert [f.name for f in k.fields if f.role == "index"] == ["target"]


@pytest.mark.slow  # an sm_90a compile through cutlass/QuACK
@needs_build
def test_a_gathered_index_read_as_a_value_too_compiles(tmp_path):
    from coda_spec.build import BuildOptions, build_spec

    spec = tmp_path / "f5_norm_lmhead_lse.yaml"
    spec.write_text(_f5_with_valid())
    res = build_spec(spec, BuildOptions(out=tmp_path / "build", jobs=1))
    assert (res.directory / "manifest.json").is_file()
