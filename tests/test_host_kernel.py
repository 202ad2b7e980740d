"""Generated host-step kernels (``coda_spec.lower.host_kernel``): numerics, compile, golden, errors.

* Numerics: each case runs its generated Triton kernel under Triton's CPU interpreter, in a
  subprocess (``tests/host_interp.py``: TRITON_INTERPRET must be set before Triton decorates
  the kernel, and the build tests of this session need the real compiler), on small shapes
  whose row width is not a multiple of the chunk, and compares every tensor the kernel writes
  with the reference interpreter (fp32) on the same inputs: fp32 outputs to ~1e-5, 16-bit
  outputs after rounding the reference to their dtype (at most a one-ulp rounding flip).
* Compile: the catalogue's host steps compile to sm_90a cubins without a GPU.
* Golden: the generated source of b4 (regenerate with ``CODA_UPDATE_GOLDEN=1``, review the diff).
* Refusals: what a host kernel cannot express is a located error naming the item.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from coda_spec.check.frontend import check_file
from coda_spec.errors import SpecError
from coda_spec.lower.host_kernel import HostKernelError, host_kernel
from tests.conftest import ROOT, SPECS, assert_golden, checked_text, coda_check, needs_triton

GOLDEN = ROOT / "tests" / "golden" / "host_kernels"
EXTRA = "tests/specs_extra"

# id -> the case tests/host_interp.py runs. "block": slots per chunk, chosen so that every row
# takes several chunks and the last one is partly masked.
CASES = {
    "b3_rope_bwd": {
        "spec": "specs/b3_rope_bwd.yaml",
        "step": "rope_bwd_zdz",
        "dims": {"D": 40},  # 120 columns: 60 column pairs, chunks of 16
        "rows": 6,
        "block": 16,
    },
    "b4_ce_fwd_bwd": {
        "spec": "specs/b4_ce_fwd_bwd.yaml",
        "step": "ce_fwd_bwd",
        "dims": {"V": 1000, "D": 64},  # chunks of 64 columns; the 16th holds 40
        "rows": 12,
        # targets in the first column, in the masked last chunk, and ignored (-100) rows
        "force": {"target": {"0": 0, "3": -100, "5": 999, "7": -100}},
        "block": 64,
    },
    "llama_block_backward_rope_bwd": {
        "spec": "specs/llama_block.yaml",
        "step": "rope_bwd",
        "dims": {"D": 256, "F": 688},  # 768 columns: 384 pairs, chunks of 256
        "rows": 8,
        "block": 256,
    },
    "host_elementwise": {
        "spec": f"{EXTRA}/host_elementwise.yaml",
        "step": "chain",
        "rows": 5,
        "block": 16,  # 104 columns, one lane each
    },
    "host_pairs": {
        "spec": f"{EXTRA}/host_pairs.yaml",
        "step": "pairs",
        "rows": 5,
        "block": 16,  # 24 slots; tiles of 1, 2 and 4 lanes
    },
    "host_col_index": {
        "spec": f"{EXTRA}/host_col_index.yaml",
        "step": "cols",
        "rows": 5,
        "block": 8,  # 20 slots of 2 lanes: the column index is (2 slot, 2 slot + 1)
    },
    "host_gather": {
        "spec": f"{EXTRA}/host_gather.yaml",
        "step": "pick",
        "rows": 9,
        "block": 8,  # 20 slots of 2 lanes
        "force": {"idx": {"0": 39, "1": -1, "2": 0}},  # last column, ignored, first column
    },
    "reduce_col": {  # per-row terms to an (M, W) buffer, folded here as the finalize folds them
        "spec": "tests/primitives/reduce_col.yaml",
        "step": "hs",
        "dims": {"F": 104},  # chunks of 16 columns; the 7th holds 8
        "rows": 7,
        "block": 16,
    },
    "host_vector": {
        "spec": f"{EXTRA}/host_vector.yaml",
        "step": "nll",
        "rows": 7,
        "block": 1,  # over a vector: per-row values only, no loop
    },
}

TOLERANCE = {"fp32": (1e-5, 1e-5), "bf16": (2**-8, 1e-5), "fp16": (2**-11, 1e-5)}


pytestmark = pytest.mark.usefixtures("at_root")  # spec paths in generated comments: relative


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    """case id -> the result of tests/host_interp.py for it (every case, in one subprocess,
    once per module, at the first use)."""
    done: dict = {}

    def get(case: str) -> dict:
        if not done:
            done.update(interpret_all(CASES, tmp_path_factory.mktemp("cases")))
        result = done[case]
        assert "error" not in result, result.get("error")
        return result

    return get


def _interpret(case: dict, tmp_path) -> dict:
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    case_file = tmp_path / "case.json"
    case_file.write_text(json.dumps(case if isinstance(case, list) else {"seed": 0, **case}))
    out = tmp_path / "result.pt"
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run(
        [sys.executable, "-m", "tests.host_interp", str(case_file), str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return torch.load(out)


def interpret_all(cases: dict, tmp_path) -> dict:
    """``{id: case}`` run in one subprocess (``tests.host_interp``'s batch form): ``{id: its
    result}``, a case that raised holding ``{"error": traceback}``."""
    batch = [{"id": i, "seed": 0, **case} for i, case in cases.items()]
    return _interpret(batch, tmp_path)


@pytest.mark.slow
@needs_triton
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_kernel_matches_reference_under_interpreter(case, interpreted):
    import torch

    result = interpreted(case)
    assert result["kernel"], "the kernel writes nothing"
    for name, got in result["kernel"].items():
        dtype = result["dtypes"][name]
        want = result["reference"][name].to(got.dtype)  # a 16-bit output: the reference rounded
        rtol, atol = TOLERANCE[dtype]
        torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol, msg=name)
        if dtype != "fp32":  # rounding flips of fp32 last-bit differences only
            same = (got.float() == want.float()).float().mean().item()
            assert same >= 0.99, f"{name}: only {same:.1%} of elements equal after rounding"


@pytest.mark.slow
@needs_triton
def test_b4_case_covers_ignored_and_masked_targets(interpreted):
    """The b4 case exercises what it claims: ignored rows (loss 0, gradient 0) and a target in
    the masked last chunk."""
    import torch

    result = interpreted("b4_ce_fwd_bwd")
    target = result["reads"]["target"]
    ignored = target == -100
    assert ignored.sum() >= 2 and (target == 999).any()
    assert torch.all(result["kernel"]["loss"][ignored] == 0)
    assert torch.all(result["kernel"]["dlogits"][ignored] == 0)
    assert result["folds"] == ["finalize_zdz"]


def _host_steps():
    out = []
    for path in SPECS:
        checked = check_file(path.relative_to(ROOT))
        spec = checked.spec
        steps = spec.all_steps()
        out += [(path.stem, s.name) for s in steps if s.kind == "host"]
    return out


HOST_STEPS = _host_steps()


@pytest.mark.parametrize("spec,step", HOST_STEPS, ids=[f"{a}-{b}" for a, b in HOST_STEPS])
def test_every_statement_names_its_spec_line(spec, step):
    checked = check_file(f"specs/{spec}.yaml")
    source = host_kernel(checked, step).source
    compile(source, f"{spec}.py", "exec")  # a real Python module
    assert source.startswith("# Generated by coda ") and f"step {step} " in source.splitlines()[0]
    body = source.split("):\n", 1)[1].splitlines()
    last = ""
    for line in body:
        text = line.strip()
        if text.startswith("#"):
            last = text
        elif text and not text.startswith("for "):
            assert last.startswith(f"# specs/{spec}.yaml:"), line


def test_catalogue_host_steps_fold_their_finalizes():
    kernels = {(s, n): host_kernel(check_file(f"specs/{s}.yaml"), n) for s, n in HOST_STEPS}
    assert kernels[("b3_rope_bwd", "rope_bwd_zdz")].folds == ("finalize_zdz",)
    assert kernels[("b4_ce_fwd_bwd", "ce_fwd_bwd")].folds == ("finalize_zdz",)
    assert kernels[("llama_block", "rope_bwd")].folds == ("finalize_zdz2",)
    for k in kernels.values():
        assert k.grid == ("M",)
        assert len(k.args) == len(k.signature)
        written = [o["tensor"] for o in k.outputs]
        tensors = [a["tensor"] for a in k.args if "tensor" in a]
        assert written == tensors[-len(written) :]  # reads, then writes, then shapes
        shapes = [a for a in k.args if "tensor" not in a]
        assert shapes[0]["extent"][1] == 1 and shapes[0]["div"] in (1, 2, 4)  # SLOTS
        assert k.aligned == ("SLOTS",)


def test_b4_source_matches_golden():
    checked = check_file("specs/b4_ce_fwd_bwd.yaml")
    kernel = host_kernel(checked, "ce_fwd_bwd")
    assert_golden(GOLDEN / "b4_ce_fwd_bwd.ce_fwd_bwd.py", kernel.source)
    contract = {
        "entry": kernel.entry,
        "signature": [list(x) for x in kernel.signature],
        "constexprs": [list(x) for x in kernel.constexprs],
        "args": list(kernel.args),
        "outputs": list(kernel.outputs),
        "grid": list(kernel.grid),
        "num_warps": kernel.num_warps,
        "folds": list(kernel.folds),
    }
    assert_golden(GOLDEN / "b4_ce_fwd_bwd.ce_fwd_bwd.json", json.dumps(contract, indent=1) + "\n")


def _compiler():
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1 replaces the compiler")
    from coda_spec.lower.triton_aot import compile_kernel

    return compile_kernel


@pytest.mark.slow
@needs_triton
@pytest.mark.parametrize(
    "spec,step",
    [("b3_rope_bwd", "rope_bwd_zdz"), ("b4_ce_fwd_bwd", "ce_fwd_bwd")],
    ids=["b3_rope_bwd", "b4_ce_fwd_bwd"],
)
def test_compiles_to_a_cubin(spec, step, tmp_path):
    compile_kernel = _compiler()
    kernel = host_kernel(check_file(f"specs/{spec}.yaml"), step)
    entry = compile_kernel(kernel, tmp_path)
    cubin = tmp_path / entry["cubin"]
    assert cubin.read_bytes()[:4] == b"\x7fELF"
    assert entry["name"] == kernel.entry
    assert entry["args"] == [dict(a) for a in kernel.args]
    assert entry["types"] == [t for _, t in kernel.signature]
    written = {o["tensor"] for o in kernel.outputs}
    assert [o["tensor"] for o in entry["outputs"]] == [
        a["tensor"] for a in kernel.args if a.get("tensor") in written
    ]
    fast = entry["aligned"]  # the cubin that assumes SLOTS % 16 == 0: vector accesses
    assert (tmp_path / fast["cubin"]).read_bytes()[:4] == b"\x7fELF"
    assert [entry["types"][i] for i in fast["params"]] == ["i32"] and fast["multiple"] == 16
    assert all(o["init"] == "empty" and o["shape"][0] == "M" for o in entry["outputs"])
    assert 0 <= entry["hidden"] <= 2
    assert entry["grid"] == ["M"]
    assert entry["folds"] == ["finalize_zdz"]


@pytest.mark.slow
@needs_triton
@pytest.mark.parametrize("case", ["host_elementwise", "host_pairs", "host_gather", "host_vector"])
def test_test_specs_compile(case, tmp_path):
    """The synthetic specs' kernels (every host lowering: 1, 2 and 4 lanes, masks, online
    log-sum-exp, gathers) compile too, at the default chunk and at the test's masked one."""
    compile_kernel = _compiler()
    c = CASES[case]
    for block in (None, c["block"]):
        kernel = host_kernel(check_file(c["spec"]), c["step"], block=block)
        assert compile_kernel(kernel, tmp_path / str(block))["hidden"] <= 2


HEADER = """\
coda: 1
name: inline
dims: {M: dynamic, W: 64}
tensors:
  x: {shape: [M, W], dtype: bf16}
  t: {shape: [M], dtype: int32, range: [0, W], ignore_index: -100}
steps:
  - host: h
    over: x
    body:
      - {load_tile: x}
"""


PREPASS_IN_HOST = """\
coda: 1
name: inline
dims: {M: dynamic, W: 64}
tensors:
  x: {shape: [M, W], dtype: bf16}
steps:
  - host: h
    over: x
    body:
      - {load_tile: x}
      - {prepass: mean, of: x, as: mu}
      - {sub: [x, mu], as: y}
      - {store: y}
outputs: {y: bf16}
"""


def test_unsupported_primitive_is_a_clear_error(tmp_path):
    """A primitive without a host lowering: the host kernel's located refusal, which ``coda
    check`` gives too (issue 31: check called it valid, build refused it)."""
    checked = checked_text(PREPASS_IN_HOST, "prepass_host.yaml")
    with pytest.raises(HostKernelError) as info:
        host_kernel(checked, "h")
    (diag,) = info.value.diagnostics
    assert diag.message.startswith(
        "host step 'h': primitive 'prepass' has no host-kernel lowering (a per-row statistic"
    )
    assert (diag.file, diag.line, diag.col) == ("prepass_host.yaml", 11, 9)  # at the item
    assert diag.hint == "use it in a GEMM epilogue (a kernel step)"
    assert isinstance(info.value, SpecError)
    path = tmp_path / "prepass_host.yaml"
    path.write_text(PREPASS_IN_HOST)
    res = coda_check(str(path))
    assert res.exit_code == 2
    want = "prepass_host.yaml:11:9: error: steps[0].body[1]: host step 'h': primitive 'prepass'"
    assert want in res.output


def test_reduce_col_in_a_host_step_lowers():
    """A host ``reduce_col`` (issue 31: coda grad's bias gradient of a GEMM-less step; build
    refused it) writes each row's terms to an (M, W) buffer its finalize folds over the rows."""
    checked = check_file(f"{EXTRA}/empty_reductions.yaml")
    kernel = host_kernel(checked, "col_stats")
    shapes = {o["tensor"]: o["shape"] for o in kernel.outputs}
    assert shapes == {"a_part": ["M", 256], "hs_part": ["M", 256]}
    assert kernel.folds == ()  # a fold over rows spans programs: the finalize's own kernel


def test_second_pass_is_refused_naming_the_item():
    checked = checked_text(
        HEADER
        + """\
      - {gather_col: x, index: t, as: xt}
      - {sub: [x, xt], as: d}
      - {store: d}
outputs: {d: bf16}
"""
    )
    with pytest.raises(HostKernelError) as info:
        host_kernel(checked, "h")
    (diag,) = info.value.diagnostics
    assert diag.line == 13
    assert "host step 'h': 'sub' (line 13) reads 'xt', which 'gather_col' (line 12)" in diag.message
    assert "second pass" in diag.message


def test_grouped_row_reduction_is_refused():
    checked = checked_text(
        HEADER
        + """\
      - {reduce_row: sumsq, of: x, group: 16, as: ss}
  - {finalize: sum, of: ss, as: s}
outputs: {s: fp32}
"""
    )
    with pytest.raises(HostKernelError, match=r"reduces per group of columns; per-\(row, group\)"):
        host_kernel(checked, "h")


def test_block_must_be_a_power_of_two():
    checked = check_file("specs/b3_rope_bwd.yaml")
    with pytest.raises(ValueError, match="power of two"):
        host_kernel(checked, "rope_bwd_zdz", block=48)
