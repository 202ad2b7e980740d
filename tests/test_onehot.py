"""The `onehot` primitive in GEMM epilogues: math, validation, lowering, the generated text's
numbers, the LM-head cross-entropy backward spec, and its sm_90a build.

``onehot`` (``coda_spec/primitives/onehot.py``) lowers through the kernel's column table (a
``RowVecLoad`` the runtime fills: ``primitives.lower_api.LowerCtx.columns``) and the index as a
per-row fp32 value; these tests check every layer that file feeds:

* Reference: 1 at column ``index[m]``, all zero on ignored and out-of-range rows.
* Validation: a non-integer index is one located error; so is a packed kernel, which ``coda
  check`` refuses exactly as the build does.
* Lowering: the kernel declares the column table (role ``columns``, shape (1, N) as the dim
  expression) and compares it with the index, in plain and ``acc_pair`` mode, with the
  ``ignore_index`` guard only where an ignored index could equal a column.
* The generated statements, executed on CPU tensors (``tests/epilogue_fn.py``), give the
  reference's numbers: hits, the first and last column, ignored rows, out-of-range indices.
* ``tests/specs_extra/lmhead_ce_bwd.yaml`` (dlogits = softmax * d_lse + onehot * d_tl in the
  logits GEMM's epilogue) is proven by ``coda check --math`` on inputs that reach both hits and
  ignored rows, and the proof fails when the ignored rows or the column are got wrong; its
  kernel.py is a golden file; it builds for sm_90a GPU-blind (slow tier).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coda_spec.check.frontend import check_file
from coda_spec.config import BuildConfig
from coda_spec.errors import EXIT_MISMATCH, EXIT_OK, SpecError
from coda_spec.lower.module import lower_spec
from coda_spec.primitives import registry
from coda_spec.primitives.lower_api import Field
from tests.conftest import ROOT, assert_golden, checked_text, coda_check, needs_build

SPEC = ROOT / "tests" / "specs_extra" / "lmhead_ce_bwd.yaml"
GOLDEN = ROOT / "tests" / "golden" / "kernels" / "lmhead_ce_bwd.py"
N = 256

KERNEL = """\
coda: 1
name: {name}
dims: {{M: dynamic, D: 64, V: 256}}
tensors:
  h: {{shape: [M, D], dtype: bf16}}
  w: {{shape: [V, D], dtype: bf16}}
  t: {{shape: [M], dtype: {dtype}, range: [0, V]{ignore}}}
  z: {{shape: [M, 2*V], dtype: bf16}}
steps:
  - kernel: k
    gemm: {{a: h, b: w.T}}
    epilogue:
{items}
{after}outputs: {{y: bf16}}
"""
PLAIN = ["{onehot: t, as: oh}", "{sub: [acc, oh], as: y}", "{store: y}"]
# a gated output makes the kernel acc_pair: full-width values are (even, odd) column pairs
PAIRED = ["{onehot: t, as: oh}", "{sub: [acc, oh], as: d}", "{store: d}"]
PAIRED += ["{swiglu: acc, as: y}", "{store: y}"]


def spec_text(items, ignore=-100, dtype="int32", after="", name="oh") -> str:
    """A one-kernel spec: acc = h @ w.T (M x V, V = 256), an index tensor t, a 2V-wide tile z
    (for packed kernels), ``items`` as its epilogue and ``after`` as its later steps."""
    ign = "" if ignore is None else f", ignore_index: {ignore}"
    body = "\n".join(f"      - {i}" for i in items)
    return KERNEL.format(items=body, ignore=ign, dtype=dtype, after=after, name=name)


def _kernel(items, ignore=-100):
    [k] = lower_spec(checked_text(spec_text(items, ignore), "oh.yaml"), BuildConfig()).kernels
    return k


def _statements(k) -> list[str]:
    return [ln.strip() for ln in k.body if not ln.strip().startswith("#")]


# -- reference ---------------------------------------------------------------------------------


def _reference(idx: list, width: int, ignore):
    torch = pytest.importorskip("torch")
    from coda_spec.prove.reference import PRECISIONS, RefCtx

    decl = SimpleNamespace(tensor=lambda name: SimpleNamespace(ignore_index=ignore))
    rt = RefCtx(PRECISIONS["fp64"], {}, decl, width=width, rows=len(idx))
    op = SimpleNamespace(get=lambda key: "t")
    t = torch.tensor(idx, dtype=torch.int32)
    (y,) = registry()["onehot"].reference(rt, op, {}, {"onehot": t})
    return y


def test_reference_is_one_hot_and_zero_on_ignored_and_out_of_range_rows():
    torch = pytest.importorskip("torch")
    y = _reference([3, -100, 0, 7, 8, -5], 8, -100)
    want = torch.zeros(6, 8, dtype=torch.float64)
    want[0, 3] = want[2, 0] = want[3, 7] = 1.0
    assert torch.equal(y, want)


def test_reference_with_a_column_as_ignore_index_zeroes_those_rows():
    y = _reference([0, 1, 0], 4, 0)
    assert y.sum(dim=1).tolist() == [0.0, 1.0, 0.0] and y[1, 1] == 1.0


# -- validation --------------------------------------------------------------------------------


def test_an_fp32_index_is_a_located_error():
    with pytest.raises(SpecError) as e:
        checked_text(spec_text(PLAIN, ignore=None, dtype="fp32"), "oh.yaml")
    [d] = [d for d in e.value.diagnostics if "onehot" in d.message]
    assert (d.line, d.col) == (13, 18)  # the item's index tensor
    assert d.message == "onehot needs an integer index tensor; 't' is fp32"


def test_a_packed_kernel_is_refused_by_check_and_build_alike(tmp_path):
    """The check stage refuses onehot in a packed kernel at its item, with the build's words
    (tests/test_lowering.py checks that the lowering's guard says the same)."""
    items = ["{load_tile: z}", "{onehot: t, as: oh}", "{mul: [acc, oh], as: g}"]
    items += ["{dswiglu: g, z: z, as: [dz, hh]}", "{store: dz, to: y}", "{store: hh}"]
    spec = tmp_path / "oh.yaml"
    spec.write_text(spec_text(items))
    run = coda_check(spec.name, cwd=tmp_path)
    assert run.exit_code == 2
    head = "oh.yaml:14:9: error: steps[0].epilogue[1]: cannot lower 'onehot': a packed_pair kernel"
    assert head in run.output and run.errors == 1
    assert "compute it in a host step, or in a plain or acc_pair kernel" in run.output


# -- lowering ------------------------------------------------------------------------------------


def test_the_kernel_declares_the_column_table_and_compares_it_with_the_index():
    k = _kernel(PLAIN)
    assert '"columns": RowVecLoad("columns")' in k.decorator
    assert '"t": ColVecLoad("t")' in k.decorator
    assert Field("columns", "", "columns", (1, N), "fp32") in k.fields
    assert Field("t", "t", "col", (1, "M"), "fp32", "to_fp32") in k.fields  # int32 -> fp32
    assert _statements(k)[:2] == ["oh = select(columns == t, 1.0, 0.0)", "y = acc - oh"]
    assert "select" in k.imports  # coda_spec.lower.kernel_lib's helper


def test_the_column_table_is_sized_by_the_dim_expression():
    (width,) = {f.shape[1] for f in _kernel(PLAIN).fields if f.role == "columns"}
    assert width == 256 and getattr(width, "expr", None) == "V"  # re-sized builds follow V


def test_an_ignore_index_that_is_a_column_guards_the_hit():
    assert _statements(_kernel(PLAIN, ignore=0))[:2] == [
        "oh_keep = select(t != 0.0, 1.0, 0.0)",
        "oh = select(columns == t, oh_keep, 0.0)",
    ]
    assert _statements(_kernel(PLAIN, ignore=None))[0] == "oh = select(columns == t, 1.0, 0.0)"


def test_acc_pair_mode_compares_each_lane_of_the_column_pair():
    k = _kernel(PAIRED)
    assert k.mode == "acc_pair"
    assert _statements(k)[:2] == [
        "columns_a, columns_b = unpack(columns)",
        "oh = pack(select(columns_a == t, 1.0, 0.0), select(columns_b == t, 1.0, 0.0))",
    ]


# -- the generated statements' numbers (CPU) ---------------------------------------------------

# hits (first and last column included), ignored rows, indices past either end
INDEX = [5, -100, 0, 255, 256, -1, 17, -100, 300, 128]


@pytest.mark.parametrize("ignore", [-100, 0, None], ids=["ignore-100", "ignore0", "no-ignore"])
@pytest.mark.parametrize("items", [PLAIN, PAIRED], ids=["plain", "acc_pair"])
def test_generated_statements_compute_the_reference(items, ignore):
    torch = pytest.importorskip("torch")
    from tests.epilogue_fn import NAMES, run_fn

    k = _kernel(items, ignore)
    gen = torch.Generator().manual_seed(0)
    acc = torch.randn(len(INDEX), N, generator=gen)
    idx = torch.tensor(INDEX, dtype=torch.float32).reshape(-1, 1)  # the runtime's to_fp32
    table = torch.arange(N, dtype=torch.float32).reshape(1, -1)  # the runtime's column table
    names = dict(NAMES, swiglu=lambda g, u: g * torch.sigmoid(g) * u)
    out = run_fn(k, acc, {"columns": table, "t": idx}, names)
    want = acc - _reference(INDEX, N, ignore).float()
    torch.testing.assert_close(out["D"], want, rtol=0, atol=0)
    hits = (out["D"] != acc).sum(dim=1).tolist()
    assert hits == [int(i in (5, 0, 255, 17, 128) and i != ignore) for i in INDEX]


# -- the LM-head cross-entropy backward --------------------------------------------------------


def test_lmhead_ce_bwd_is_proven_by_check_math():
    res = coda_check("--math", SPEC.relative_to(ROOT))
    assert res.exit_code == EXIT_OK, res.output
    assert "2/2 forward outputs equal equivalent_to" in res.output


def test_check_and_build_stop_after_lower_both_accept_it(tmp_path, at_root):
    from tests.conftest import invoke

    assert coda_check(SPEC.relative_to(ROOT)).exit_code == EXIT_OK
    res = invoke("build", "--stop-after", "lower", "-o", tmp_path, SPEC.relative_to(ROOT))
    assert res.exit_code == EXIT_OK, res.output
    [kernel_py] = tmp_path.glob("lmhead_ce_bwd-*/kernel.py")
    assert kernel_py.read_text() == GOLDEN.read_text()


def test_a_gemm_wider_than_fp32_column_indices_is_a_located_error():
    text = spec_text(PLAIN).replace("V: 256}", "V: 16777224}")
    with pytest.raises(SpecError) as e:
        checked_text(text, "oh.yaml")
    [d] = e.value.diagnostics
    assert d.line == 13 and d.message.startswith("onehot: GEMM N is 16777224; column indices")


def test_the_proofs_inputs_reach_hits_and_ignored_rows():
    pytest.importorskip("torch")
    from coda_spec.prove.inputs import make_inputs
    from coda_spec.prove.mathcheck import sizes_of, small

    case = small(check_file(SPEC))
    sizes = sizes_of(case)
    low, _ = make_inputs(case.spec, sizes, seed=0)  # the seed check --math uses
    t = low["target"]
    assert int((t == -100).sum()) >= 3
    assert int(((t >= 0) & (t < sizes["V"])).sum()) >= 30


@pytest.mark.parametrize(
    "wrong",
    [
        "y = one_hot(clamp(target, min=0), V)",  # ignored rows not zeroed (they hit column 0)
        "y = one_hot(clamp(target + 1, min=0, max=V - 1), V) * (target != -100)[:, None]",
    ],
    ids=["ignored-rows-hit", "next-column"],
)
def test_the_proof_fails_when_the_one_hot_is_wrong(wrong, tmp_path):
    text = SPEC.read_text()
    right = "y = one_hot(clamp(target, min=0), V) * (target != -100)[:, None]"
    assert right in text
    bad = tmp_path / "lmhead_ce_bwd.yaml"
    bad.write_text(text.replace(right, wrong))
    res = coda_check("--math", bad.name, cwd=tmp_path)
    assert res.exit_code == EXIT_MISMATCH, res.output
    assert "forward output 'dlogits' differs from equivalent_to" in res.output


def test_every_lmhead_ce_bwd_mutant_is_caught():
    pytest.importorskip("torch")
    from tests.algebra import mutation_report, sizes_of, small

    checked = small(check_file(SPEC))
    killed, total, survivors = mutation_report(checked, sizes_of(checked))
    assert survivors == [] and killed == total >= 10


def test_lmhead_ce_bwd_kernel_is_golden(at_root):
    source = lower_spec(check_file(SPEC.relative_to(ROOT)), BuildConfig()).source
    assert_golden(GOLDEN, source)
    assert "    y = select(columns == target, 1.0, 0.0)\n" in source
    assert '"columns": RowVecLoad("columns")' in source


@pytest.mark.slow  # an sm_90a compile through cutlass/QuACK (about 15 s)
@needs_build
def test_lmhead_ce_bwd_builds_for_sm90a(tmp_path, at_root):
    import json

    from coda_spec.build import BuildOptions, build_spec
    from tests.cubin import cubins, nvdisasm_path, opcodes

    res = build_spec(SPEC.relative_to(ROOT), BuildOptions(out=tmp_path, jobs=1))
    manifest = json.loads((res.directory / "manifest.json").read_text())
    [k] = [s for s in manifest["steps"] if s["kind"] == "kernel"]
    table = [f for f in k["fields"] if f["role"] == "columns"]
    assert table == [
        {
            "name": "columns",
            "tensor": "",
            "role": "columns",
            "shape": [1, "V"],
            "dtype": "fp32",
            "transform": "",
            "fold": "",
        }
    ]
    assert "columns" in k["field_order"]
    if nvdisasm_path() is not None:
        for cb in cubins(res.directory / f"{k['symbol']}.o"):
            ops = opcodes(cb, tmp_path)
            assert ops["HGMMA"] > 0 and ops["STL"] == 0 and ops["LDL"] == 0
