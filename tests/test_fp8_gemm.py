"""fp8 GEMM operands (issue 22 item 4), CPU side.

fp8 inputs (``fp8_e4m3``/``fp8_e5m2``) feed a kernel's GEMM as A and B, k-major only (``a: x``
with x [M, K], ``b: w.T`` with w [N, K]), both 8-bit (mixed e4m3 x e5m2 allowed, as QuACK 0.6.5's
sm90 GEMM takes it); every other read of an fp8 input is refused at its place. fp8 kernels hold
their accumulator twice over (QuACK's fp8 slow accumulation), so a tile whose accumulator is
over ``FP8_ACC_PER_THREAD`` per thread is refused by the build (the default pingpong 128x128
spills). ``fp8_gemm.yaml`` is proven with every mutant killed; inputs are drawn in the formats;
the GPU-blind compile is checked for its operand dtypes (slow). GPU verify:
``tests/gpu/test_fp8_gemm_gpu.py``.
"""

from __future__ import annotations

import json

import pytest

from coda_spec.check.frontend import check_file
from coda_spec.check.suits import FP8_ACC_PER_THREAD, gemm_refusal
from coda_spec.config import DEFAULT, BuildConfig, KernelSizes, parse_config
from coda_spec.errors import EXIT_OK, SpecError
from coda_spec.lower.module import lower_spec
from tests.conftest import ROOT, checked_text, invoke, needs_build

SPEC = ROOT / "tests" / "specs_extra" / "fp8_gemm.yaml"


def _errors(text: str) -> list:
    with pytest.raises(SpecError) as e:
        checked_text(text)
    return [(d.line, d.col, d.message, d.hint) for d in e.value.diagnostics]


def test_fp8_gemm_is_proven_by_check_math():
    res = invoke("check", "--math", SPEC)
    assert res.exit_code == EXIT_OK, res.output
    assert "4/4 forward outputs equal equivalent_to" in res.output
    assert "warning" not in res.output  # the clamp is exercised at the proof's sizes


def test_every_fp8_gemm_mutant_is_caught():
    pytest.importorskip("torch")
    from tests.algebra import mutation_report, sizes_of, small

    checked = small(check_file(SPEC))
    killed, total, survivors = mutation_report(checked, sizes_of(checked))
    assert survivors == [] and killed == total >= 20


def test_fp8_operands_are_typed_and_the_store_defaults_to_bf16():
    checked = check_file(SPEC)
    a = checked.analysis
    assert [a.tensor(n).dtype for n in ("x", "w", "g")] == ["fp8_e4m3", "fp8_e4m3", "fp8_e5m2"]
    infos = {s.name: i for s, i in a.step_infos()}
    assert infos["scaled_mm"].operands == ("fp8_e4m3", "fp8_e4m3")
    assert infos["mixed"].operands == ("fp8_e4m3", "fp8_e5m2")
    assert a.tensor("y").dtype == "bf16" and a.tensor("q").dtype == "fp8_e4m3"
    kernels = {
        k.step: k for k in lower_spec(checked, parse_config(checked.spec.configs[0])).kernels
    }
    assert kernels["scaled_mm"].d[:2] == ("y", "bf16")


def test_fp8_inputs_are_drawn_in_their_format():
    torch = pytest.importorskip("torch")
    from coda_spec.dtypes import round_to
    from coda_spec.prove.inputs import make_inputs

    checked = check_file(SPEC)
    sizes = {"M": 64, "K": 256, "N": 512}
    low, exact = make_inputs(checked.spec, sizes)
    assert low["x"].dtype == torch.float8_e4m3fn and low["g"].dtype == torch.float8_e5m2
    for n in ("x", "w", "g"):
        assert torch.equal(exact[n], low[n].double())  # exact in fp64
        assert 0.8 < exact[n].std().item() < 1.2  # unit normal, not scaled into subnormals
    text = SPEC.read_text().replace(
        "x:  {shape: [M, K], dtype: fp8_e4m3}",
        "x:  {shape: [M, K], dtype: fp8_e4m3, range: [300, 600]}",
    )
    low, exact = make_inputs(checked_text(text).spec, sizes)
    x = exact["x"]
    assert x.min().item() >= 288 and x.max().item() == 448.0  # saturates, never NaN
    assert torch.equal(x, round_to(x, "fp8_e4m3"))


def test_lowp_reference_upcasts_fp8_and_rounds_the_product_to_bf16():
    torch = pytest.importorskip("torch")
    from coda_spec.prove.inputs import make_inputs
    from coda_spec.prove.reference import run

    checked = check_file(SPEC)
    sizes = {"M": 32, "K": 256, "N": 512}
    low, exact = make_inputs(checked.spec, sizes)
    lowp = run(checked.analysis, low, "lowp", sizes)
    ref = run(checked.analysis, exact, "fp64", sizes)
    acc = (exact["x"] @ exact["g"].T).float().to(torch.bfloat16).float()
    assert torch.equal(lowp["out"].float(), (acc * low["sg"]).to(torch.bfloat16).float())
    assert (lowp["out"].double() - ref["out"]).abs().max().item() < 0.05 * ref["out"].abs().max()


def test_an_fp8_a_read_transposed_is_refused():
    text = (
        SPEC.read_text()
        .replace("x:  {shape: [M, K], dtype: fp8_e4m3}", "x:  {shape: [K, M], dtype: fp8_e4m3}")
        .replace("gemm: {a: x, b: w.T}", "gemm: {a: x.T, b: w.T}")
        .replace("gemm: {a: x, b: g.T}", "gemm: {a: x.T, b: g.T}")
    )
    errs = _errors(text)
    assert [(e[0], e[1]) for e in errs] == [(29, 15), (41, 15)]
    msg, hint = errs[0][2], errs[0][3]
    assert msg.startswith("fp8 operand 'x' is not k-major (a: x.T reads [256, M]")
    assert "takes fp8_e4m3 operands k-major only" in msg
    assert hint == "declare 'x' as [M, K] ([M, 256]) and write a: x"


def test_an_fp8_b_read_n_major_is_refused():
    text = (
        SPEC.read_text()
        .replace("g:  {shape: [N, K], dtype: fp8_e5m2}", "g:  {shape: [K, N], dtype: fp8_e5m2}")
        .replace("gemm: {a: x, b: g.T}", "gemm: {a: x, b: g}")
    )
    [(line, col, msg, hint)] = _errors(text)
    assert (line, col) == (41, 21)
    assert msg.startswith("fp8 operand 'g' is not k-major (b: g reads [256, 512] (K first)")
    assert hint == "declare 'g' as [N, K] ([512, 256]) and write b: g.T"


def test_an_fp8_k_must_be_16_elements():
    text = SPEC.read_text().replace("K: 256", "K: 264")  # 16-bit rows fit, 8-bit ones do not
    errs = _errors(text)
    assert [(e[0], e[1]) for e in errs] == [(29, 11), (41, 11)]
    assert errs[0][2] == (
        "the reduction dim K is 264 wide; fp8_e4m3 rows must be a multiple of 16 elements "
        "(16-byte TMA rows)"
    )


def test_fp8_inputs_are_read_as_gemm_operands_only():
    text = SPEC.read_text().replace(
        "      - {mul: [acc, sg], as: z}",
        "      - {load_row: w, as: wr}\n      - {mul: [acc, sg], as: z}",
    )
    errs = _errors(text)
    assert (errs[0][0], errs[0][1]) == (44, 20)
    assert errs[0][2].startswith("'w' is an fp8_e4m3 input; coda 1 reads fp8 inputs only as GEMM")


def test_the_config_rule_counts_the_accumulator_per_thread():
    fp8 = KernelSizes((), 512, fp8=True)
    assert DEFAULT.acc_per_thread() == 128 and gemm_refusal(DEFAULT, fp8) is not None
    assert gemm_refusal(DEFAULT, KernelSizes((), 512)) is None  # bf16: no rule
    fits = ("128x128,cluster=2x1", "128x64,cluster=2x1,pingpong", "128x192,cluster=2x1")
    for text in fits:
        cfg = parse_config(text)
        assert cfg.acc_per_thread() <= FP8_ACC_PER_THREAD and gemm_refusal(cfg, fp8) is None
    assert parse_config("256x128,cluster=2x1").acc_per_thread() == 128
    assert BuildConfig(tile_m=192, tile_n=128).acc_per_thread() == 64  # 3 warpgroups on M


def test_the_default_config_is_refused_at_the_gemm():
    checked = check_file(SPEC)
    with pytest.raises(SpecError) as e:
        lower_spec(checked, DEFAULT)
    d = e.value.diagnostics[0]
    assert (d.line, d.col) == (29, 11)
    assert d.message.startswith(
        "cannot build the gemm at 128x256,cluster=2x1,cooperative,cstages=2: an fp8 GEMM at this "
        "tile holds 128 fp32 accumulator elements per thread"
    )
    assert "128x128,cluster=2x1,cooperative" in d.hint


@pytest.mark.slow
@needs_build
def test_the_compiled_kernels_take_fp8_operands(tmp_path):
    res = invoke("build", "-j", "1", "-o", str(tmp_path), SPEC)
    assert res.exit_code == EXIT_OK, res.output
    assert "spills" not in res.output
    [build] = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()]
    rec = {
        s: json.loads((build / f"coda_{s}.compiled.json").read_text())
        for s in ("scaled_mm", "mixed")
    }
    assert rec["scaled_mm"]["dtypes"] == {"A": "float8_e4m3fn", "B": "float8_e4m3fn"}
    assert rec["mixed"]["dtypes"] == {"A": "float8_e4m3fn", "B": "float8_e5m2"}
    assert rec["mixed"]["majors"]["A"] == "row" and rec["mixed"]["majors"]["B"] == "row"
