"""fp8 stores (``store``'s ``dtype: fp8_e4m3`` / ``fp8_e5m2``, fp8 ``outputs``), CPU side.

The rounding rule is ``coda_spec.dtypes``' (round to nearest even, saturating, NaN kept): the
epilogue's convert already is it (``cvt.rn.satfinite``), host kernels round in fp32 first and
must agree with ``round_to`` bit for bit, here under Triton's interpreter (whose own fp8
conversion does not saturate and mis-rounds a mantissa carry). ``fp8_out_amax.yaml`` (H17: a
scaled, saturated e4m3 output with its per-row amax) is proven with every mutant killed; its
GPU build and verify are ``tests/gpu/test_fp8_gpu.py``.
"""

from __future__ import annotations

import pytest

from coda_spec.check.frontend import check_file
from coda_spec.config import BuildConfig
from coda_spec.errors import EXIT_OK, SpecError
from coda_spec.lower.host_kernel import host_kernel
from coda_spec.lower.module import lower_spec
from tests.conftest import ROOT, checked_text, invoke, needs_triton
from tests.test_host_kernel import interpret_all

SPEC = ROOT / "tests" / "specs_extra" / "fp8_out_amax.yaml"
HOST_SPEC = ROOT / "tests" / "specs_extra" / "fp8_out_amax_host.yaml"


def _errors(text: str) -> list:
    with pytest.raises(SpecError) as e:
        checked_text(text)
    return [(d.line, d.col, d.message, d.hint) for d in e.value.diagnostics]


def test_fp8_out_amax_is_proven_by_check_math():
    res = invoke("check", "--math", SPEC, HOST_SPEC)
    assert res.exit_code == EXIT_OK, res.output
    assert "3/3 forward outputs equal equivalent_to" in res.output  # both specs


def test_every_fp8_out_amax_mutant_is_caught():
    pytest.importorskip("torch")
    from tests.algebra import mutation_report, sizes_of, small

    checked = small(check_file(SPEC))
    killed, total, survivors = mutation_report(checked, sizes_of(checked))
    assert survivors == [] and killed == total >= 10


def test_fp8_output_is_typed_and_lowered_as_d():
    checked = check_file(SPEC)
    assert checked.analysis.tensor("out").dtype == "fp8_e4m3"
    [kernel] = lower_spec(checked, BuildConfig()).kernels
    assert kernel.d[:2] == ("out", "fp8_e4m3")


def test_an_fp8_row_must_be_16_bytes():
    text = SPEC.read_text().replace("N: 512", "N: 520")  # a multiple of 8, not of 16
    [(line, col, msg, hint)] = _errors(text)
    assert (line, col) == (27, 9)
    assert msg == (
        "stored tile 'out' is 520 wide; fp8_e4m3 rows must be a multiple of 16 elements "
        "(16-byte TMA rows)"
    )
    assert hint == "pad it to 528"


def test_an_fp8_store_cannot_accumulate():
    text = (
        SPEC.read_text()
        .replace(
            "      - {store: sat, to: out, dtype: fp8_e4m3}",
            "      - {store: sat, to: out, dtype: fp8_e4m3}\n"
            "  - kernel: again\n"
            "    gemm: {a: x, b: w.T}\n"
            "    epilogue:\n"
            "      - {store: acc, to: out2, add_to: out, dtype: fp8_e4m3}",
        )
        .replace("outputs: {out: fp8_e4m3,", "outputs: {out2: fp8_e4m3,")
    )
    [(line, col, msg, hint)] = _errors(text)
    assert (line, col) == (31, 40)
    assert msg.startswith("an fp8_e4m3 store cannot accumulate (add_to)")
    assert hint == "store the sum in bf16 or fp32, or drop add_to"


def test_an_fp8_per_row_store_is_refused():
    text = SPEC.read_text().replace(
        "outputs: {out: fp8_e4m3, row_amax: fp32, amax: fp32}",
        "outputs: {out: fp8_e4m3, row_amax: fp8_e4m3, amax: fp32}",
    )
    errs = _errors(text)
    assert any("finalize results are fp32" in m for _, _, m, _ in errs), errs


def test_an_fp8_input_beside_a_bf16_operand_is_refused():
    """fp8 inputs feed a GEMM (tests/test_fp8_gemm.py), but both operands must be 8-bit."""
    text = SPEC.read_text().replace(
        "x:     {shape: [M, D], dtype: bf16}", "x: {shape: [M, D], dtype: fp8_e4m3}"
    )
    [(line, col, msg, hint)] = _errors(text)
    assert (line, col) == (21, 11)
    assert msg == "gemm operands differ in dtype (fp8_e4m3 vs bf16)"
    assert "needs both operands 8-bit" in hint


def test_host_store_rounds_in_fp32_then_converts():
    kernel = host_kernel(check_file(HOST_SPEC), "quantize")
    src = kernel.source
    assert "tl.clamp(" in src and "propagate_nan=tl.PropagateNan.ALL" in src
    assert ".to(tl.float8e4nv)" in src and ".to(tl.float8e5)" in src
    assert "-448.0, 448.0" in src and "-57344.0, 57344.0" in src


@pytest.mark.slow
@needs_triton
def test_host_fp8_stores_equal_round_to_bit_for_bit(tmp_path):
    """Under the interpreter, every fp8 element the host kernel writes has round_to's bits (the
    e5m2 output saturates in many elements, the e4m3 one through the clamp), and the row amax is
    exact."""
    import torch

    from coda_spec.dtypes import round_to

    case = {"spec": str(HOST_SPEC.relative_to(ROOT)), "step": "quantize", "rows": 40, "block": 32}
    result = interpret_all({"fp8": case}, tmp_path)["fp8"]
    assert "error" not in result, result.get("error")
    for name in ("out", "out5"):
        got, ref = result["kernel"][name], result["reference"][name]
        want = round_to(ref.float(), result["dtypes"][name]).to(got.dtype)
        assert got.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), name
    out5 = result["kernel"]["out5"].float()
    assert (out5.abs() == 57344.0).any() and (out5.abs() < 57344.0).any()
    assert torch.equal(result["kernel"]["row_amax"], result["reference"]["row_amax"].float())


def test_round_to_saturates_and_keeps_nan():
    torch = pytest.importorskip("torch")
    from coda_spec.dtypes import round_to

    x = torch.tensor([500.0, -1e9, float("inf"), 460.0, 465.0, -0.0, float("nan")])
    e4 = round_to(x, "fp8_e4m3")
    assert e4[:5].tolist() == [448.0, -448.0, 448.0, 448.0, 448.0]
    assert torch.signbit(e4[5]) and torch.isnan(e4[6])
    assert round_to(torch.tensor([500.0, 7e4]), "fp8_e5m2").tolist() == [512.0, 57344.0]


def test_an_epilogue_cannot_read_an_fp8_tile():
    text = (
        SPEC.read_text()
        .replace(
            "  - {finalize: max",
            "  - kernel: again\n"
            "    gemm: {a: x, b: w.T}\n"
            "    epilogue:\n"
            "      - {load_tile: out, as: q}\n"
            "      - {add: [acc, q], as: z}\n"
            "      - {store: z, dtype: bf16}\n"
            "  - {finalize: max",
            1,  # before the first finalize only
        )
        .replace("outputs: {out: fp8_e4m3,", "outputs: {z: bf16, out: fp8_e4m3,")
    )
    [(line, col, msg, hint)] = _errors(text)
    assert (line, col) == (31, 21)  # the load_tile's operand
    assert msg.startswith("'out' is fp8_e4m3; a GEMM epilogue reads no fp8 tile in coda 1")
    assert hint == "read it in a host step, or store it in bf16 too"
