"""The `col_index` primitive: the global column index as a value, in GEMM epilogues and host steps.

``col_index`` (``coda_spec/primitives/col_index.py``) is the kernel's column table itself (a
``RowVecLoad`` the runtime fills, ``primitives.lower_api.LowerCtx.columns``); in a host step the
column of each lane. The tests:

* Validation: the operand must be a tile as wide as the step; a packed kernel is refused at the
  item by ``coda check``.
* Lowering: one table per kernel however many items read it (``onehot`` shares it); ``acc_pair``
  kernels get it as column pairs.
* A masked-and-ramped LM head (the docs' example shape), proven by ``coda check --math`` with
  ``arange`` in ``equivalent_to``; its generated statements give the reference's numbers on CPU
  tensors; the host lowering matches the reference under Triton's CPU interpreter (slow tier).
"""

from __future__ import annotations

import pytest

from coda_spec.config import BuildConfig
from coda_spec.errors import EXIT_MISMATCH, EXIT_OK, SpecError
from coda_spec.lower.module import lower_spec
from tests.conftest import ROOT, checked_text, coda_check

# Column j of the logits scaled by j / V, and columns past `keep_upto` (a per-row count) zeroed:
# a position-dependent scale and a per-row column mask from one column index.
SPEC = """\
coda: 1
name: ramp
dims: {M: dynamic, D: 64, V: 256}
tensors:
  h: {shape: [M, D], dtype: bf16}
  w: {shape: [V, D], dtype: bf16}
  keep_upto: {shape: [M], dtype: fp32, range: [0, V]}
steps:
  - kernel: k
    gemm: {a: h, b: w.T}
    epilogue:
      - {col_index: acc, as: j}
      - {mul: [j, 0.00390625], as: slope}     # j / 256
      - {mul: [acc, slope], as: ramp}
      - {load_col: keep_upto}
      - {sub: [keep_upto, j], as: room}       # > 0 for the columns a row keeps
      - {relu: room, as: pos}
      - {mul: [ramp, pos], as: y}
      - {store: y}
outputs: {y: bf16}
equivalent_to: |
  j = arange(V)[None, :]
  y = (h @ w.T) * (j / 256) * relu(keep_upto[:, None] - j)
"""


def _kernel(text: str = SPEC):
    [k] = lower_spec(checked_text(text, "ramp.yaml"), BuildConfig()).kernels
    return k


def test_reference_is_the_column_index():
    torch = pytest.importorskip("torch")
    from coda_spec.primitives import registry
    from coda_spec.prove.reference import PRECISIONS, RefCtx

    rt = RefCtx(PRECISIONS["fp64"], {}, None, width=5, rows=3)
    (j,) = registry()["col_index"].reference(rt, None, {"col_index": torch.zeros(3, 5)}, {})
    assert j.tolist() == [[0.0, 1.0, 2.0, 3.0, 4.0]] and j.dtype == torch.float64


def test_a_tile_narrower_than_the_step_is_a_located_error():
    text = SPEC.replace(
        "      - {col_index: acc, as: j}",
        "      - {swiglu: acc, as: s}\n      - {col_index: s, as: j}",
    )
    with pytest.raises(SpecError) as e:
        checked_text(text, "ramp.yaml")
    d = next(d for d in e.value.diagnostics if "col_index" in d.message)
    assert (d.line, d.col) == (13, 21)
    assert (
        d.message
        == "col_index: 's' is 128 wide, not the step's 256; the index is of the step's columns"
    )


def test_a_packed_kernel_is_refused_at_the_item(tmp_path):
    text = SPEC.replace("  keep_upto:", "  z: {shape: [M, 2*V], dtype: bf16}\n  keep_upto:")
    text = text.replace(
        "      - {store: y}",
        "      - {load_tile: z}\n"
        "      - {dswiglu: y, z: z, as: [dz, hh]}\n      - {store: dz, to: y}\n"
        "      - {store: hh}",
    )
    (tmp_path / "ramp.yaml").write_text(text)
    run = coda_check("ramp.yaml", cwd=tmp_path)
    assert run.exit_code == 2 and run.errors == 1
    assert (
        "ramp.yaml:13:9: error: steps[0].epilogue[0]: cannot lower 'col_index': a packed_pair"
        in run.output
    )


def test_lowering_names_the_column_table():
    k = _kernel()
    assert '"columns": RowVecLoad("columns")' in k.decorator
    body = [ln.strip() for ln in k.body if not ln.strip().startswith("#")]
    assert body[:2] == ["j = columns", "slope = j * 0.00390625"]
    assert body[3] == "room = keep_upto - j"


def test_one_column_table_serves_every_item_of_a_kernel():
    text = SPEC.replace(
        "  keep_upto:", "  t: {shape: [M], dtype: int32, range: [0, V]}\n  keep_upto:"
    )
    text = text.replace(
        "      - {store: y}",
        "      - {onehot: t, as: oh}\n"
        "      - {col_index: acc, as: j2}\n      - {mul: [oh, j2], as: tj}\n"
        "      - {add: [y, tj], as: y2}\n      - {store: y2, to: y}",
    )
    k = _kernel(text)
    assert [f.name for f in k.fields].count("columns") == 1
    assert k.decorator.count('RowVecLoad("columns")') == 1


def test_acc_pair_kernels_get_column_pairs():
    text = SPEC.replace(
        "      - {store: y}", "      - {store: y}\n      - {swiglu: acc, as: g}\n      - {store: g}"
    ).replace("outputs: {y: bf16}", "outputs: {y: bf16, g: bf16}")
    k = _kernel(text)
    assert k.mode == "acc_pair"
    torch = pytest.importorskip("torch")
    from tests.epilogue_fn import NAMES, run_fn

    acc = torch.randn(4, 256, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([0.0, 3.5, 100.0, 256.0]).reshape(-1, 1)
    table = torch.arange(256, dtype=torch.float32).reshape(1, -1)
    names = dict(NAMES, relu=torch.relu, swiglu=lambda a, b: a * b)
    out = run_fn(k, acc, {"columns": table, "keep_upto": keep}, names)
    j = table
    torch.testing.assert_close(out["D"], acc * (j * 0.00390625) * torch.relu(keep - j))


def test_the_generated_statements_compute_the_reference():
    torch = pytest.importorskip("torch")
    from tests.epilogue_fn import NAMES, run_fn

    acc = torch.randn(4, 256, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([0.0, 3.5, 100.0, 256.0]).reshape(-1, 1)
    table = torch.arange(256, dtype=torch.float32).reshape(1, -1)
    out = run_fn(
        _kernel(), acc, {"columns": table, "keep_upto": keep}, dict(NAMES, relu=torch.relu)
    )
    want = acc * (table * 0.00390625) * torch.relu(keep - table)
    torch.testing.assert_close(out["D"], want)
    assert (
        (out["D"][0] == 0).all() and (out["D"][1, 4:] == 0).all() and (out["D"][1, 1:4] != 0).all()
    )


def test_the_ramp_is_proven_by_check_math(tmp_path):
    (tmp_path / "ramp.yaml").write_text(SPEC)
    res = coda_check("--math", "ramp.yaml", cwd=tmp_path)
    assert res.exit_code == EXIT_OK, res.output


def test_the_proof_fails_for_an_index_off_by_one(tmp_path):
    (tmp_path / "ramp.yaml").write_text(
        SPEC.replace("j = arange(V)[None, :]", "j = arange(V)[None, :] + 1")
    )
    res = coda_check("--math", "ramp.yaml", cwd=tmp_path)
    assert res.exit_code == EXIT_MISMATCH, res.output


HOST = ROOT / "tests" / "specs_extra" / "host_col_index.yaml"  # a case of test_host_kernel.py


def test_host_text_is_each_lanes_column(at_root):
    """Two lanes per slot (the step's slots are column pairs): columns 2 slot and 2 slot + 1;
    tests/test_host_kernel.py runs the kernel under Triton's interpreter against the
    reference."""
    from coda_spec.check.frontend import check_file
    from coda_spec.lower.host_kernel import host_kernel

    src = host_kernel(check_file(HOST.relative_to(ROOT)), "cols").source
    assert "j_0 = (slot * 2 + 0).to(tl.float32)" in src
    assert "j_1 = (slot * 2 + 1).to(tl.float32)" in src
