"""``coda check --math``: the CPU algebra gate must reject wrong math, forward and backward.

The specs under ``tests/math_specs/`` pass ``coda check`` (they are valid) and would build:
``wrong_equivalent_swapped`` states ``silu(up) * gate`` for a chain that computes
``silu(gate) * up``; ``wrong_backward_dswiglu`` runs dSwiGLU under a GeGLU forward.
``geglu_fwd_bwd`` is the positive control: the same chain with ``dgeglu``, whose produced ``dz``
is the gradient of the forward intermediate ``z`` (proven, not skipped).
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from coda_spec import cli
from coda_spec.check.frontend import check_file
from coda_spec.errors import EXIT_MISMATCH, EXIT_OK, EXIT_TOOL_FAILURE
from coda_spec.prove.mathcheck import diagnostics, prove, small
from tests.conftest import ROOT, checked_text, coda_check

MATH = ROOT / "tests" / "math_specs"
BUNDLED = sorted((ROOT / "specs").glob("*.yaml"))


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_bundled_spec_is_proven(path):
    report = prove(check_file(path))
    assert report.ok, [p for p in report.proofs if not p.ok]
    spec = check_file(path).spec
    want = len(spec.outputs) + (len(spec.backward.outputs) if spec.backward else 0)
    assert len(report.proofs) == want  # every output has a proof: none skipped
    assert not report.gaps, report.gaps  # the drawn inputs exercise every branch item


EXTRA = sorted(
    p
    for p in (ROOT / "tests" / "specs_extra").glob("*.yaml")
    if check_file(p).spec.equivalent_to is not None  # the others test host kernels, not math
)


@pytest.mark.parametrize("path", EXTRA, ids=lambda p: p.stem)
def test_an_extra_spec_with_equivalent_to_is_proven(path):
    report = prove(check_file(path))
    assert report.ok, [p for p in report.proofs if not p.ok]
    assert not report.gaps, report.gaps


@pytest.mark.slow
def test_cli_math_all_bundled_specs_exit_0():
    res = coda_check("--math", ROOT / "specs")  # the catalogue and its derivations (specs/grad)
    derived = sorted((ROOT / "specs" / "grad").glob("*.yaml"))
    assert res.exit_code == EXIT_OK, res.output
    assert f"{len(BUNDLED) + len(derived)} valid and proven" in res.output
    assert "8/8 backward outputs equal autograd" in res.output  # llama_block


def test_wrong_equivalent_to_passes_check_but_not_math():
    path = MATH / "wrong_equivalent_swapped.yaml"
    assert coda_check(path).exit_code == EXIT_OK
    res = coda_check("--math", path)
    assert res.exit_code == EXIT_MISMATCH, res.output
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "out = silu(up)" in t)
    assert f"{path}:{line}:3: error: equivalent_to: forward output 'out' differs" in res.output
    assert re.search(r"rel_err \d\.\d\de-0[0-2]", res.output)  # an O(1) error, not rounding
    assert "      out = silu(up) * gate\n      ^" in res.output
    assert re.findall(r"output '(\w+)' differs", res.output) == ["out"]  # z is right


def test_wrong_backward_passes_check_but_not_math():
    path = MATH / "wrong_backward_dswiglu.yaml"
    assert coda_check(path).exit_code == EXIT_OK
    res = coda_check("--math", path)
    assert res.exit_code == EXIT_MISMATCH, res.output
    lines = path.read_text().splitlines()
    store_dz = next(i for i, t in enumerate(lines, 1) if "{store: dz}" in t)
    assert f"{path}:{store_dz}:11: error: backward.steps[0].body[3]: gradient 'dz'" in (res.output)
    assert sorted(re.findall(r"gradient '(\w+)' differs", res.output)) == [
        "dh",
        "dw_gu",
        "dz",
    ]
    # the forward is right: only the backward is blamed
    assert "forward output" not in res.output


def test_a_gradient_off_by_a_constant_factor_says_so():
    """The tutorial's mistake (docs/tutorial.md): squared ReLU's derivative without its 2. Each
    gradient downstream of it is 0.5 x autograd's, and the message says that, not only 'something
    else'; an unrelated wrong backward (dSwiGLU under GeGLU) names no factor."""
    res = coda_check("--math", MATH / "wrong_backward_factor.yaml")
    assert res.exit_code == EXIT_MISMATCH, res.output
    said = re.findall(r"gradient '(\w+)' differs.*; it is 0\.5 times the expected", res.output)
    assert sorted(said) == ["db_up", "dw_up", "dx"]
    assert "a constant factor is off" in res.output
    other = coda_check("--math", MATH / "wrong_backward_dswiglu.yaml")
    assert "times the expected value" not in other.output


def test_gradient_of_an_intermediate_is_proven():
    """dz is the gradient of the forward intermediate z: proven against autograd, and a wrong
    dz is caught (the wrong spec above); it was silently skipped before."""
    report = prove(check_file(MATH / "geglu_fwd_bwd.yaml"))
    assert report.ok
    bwd = {p.output: p for p in report.proofs if p.section == "backward"}
    assert set(bwd) == {"dz", "dh", "dw_gu"}
    assert bwd["dz"].rel_err < 1e-12


def test_math_json_format():
    res = coda_check("--math", "--format", "json", MATH / "wrong_equivalent_swapped.yaml")
    assert res.exit_code == EXIT_MISMATCH
    (d,) = json.loads(res.stdout)
    assert d["path"] == "equivalent_to" and "forward output 'out' differs" in d["message"]


SPEC = """\
coda: 1
name: scaled
dims: {M: dynamic, D: 1024}
tensors:
  x: {shape: [M, D], dtype: bf16}
  w: {shape: [D, D], dtype: bf16}
steps:
  - kernel: k
    gemm: {a: x, b: w.T}
    epilogue:
      - {store: acc, to: y}
      - {relu: acc, as: r}
      - {store: r}
outputs: {y: bf16, r: bf16}
"""


def _math(tmp_path, text):
    """Write ``text`` as a spec and run ``coda check --math`` on it: (file, result)."""
    f = tmp_path / "spec.yaml"
    f.write_text(text)
    return f, coda_check("--math", f)


def test_no_equivalent_to_is_unproven(tmp_path):
    f = tmp_path / "noeq.yaml"
    f.write_text(SPEC)
    assert coda_check(f).exit_code == EXIT_OK
    res = coda_check("--math", f)
    assert res.exit_code == EXIT_MISMATCH
    assert "nothing proves this spec's 2 output(s): it has no equivalent_to" in res.output


def test_output_missing_from_equivalent_to_is_unproven(tmp_path):
    f, res = _math(tmp_path, SPEC + "equivalent_to: |\n  y = x @ w.T\n")
    assert res.exit_code == EXIT_MISMATCH, res.output
    assert "forward output 'r' is not proven: equivalent_to does not assign 'r'" in res.output
    assert f"{f}:14:" in res.output  # at outputs.r


def test_right_equivalent_to_is_proven(tmp_path):
    _, res = _math(tmp_path, SPEC + "equivalent_to: |\n  y = x @ w.T\n  r = relu(x @ w.T)\n")
    assert res.exit_code == EXIT_OK, res.output
    assert "2/2 forward outputs equal equivalent_to" in res.output


def test_backward_output_that_is_not_a_gradient():
    """A backward output outside backward.grads: a warning from check, unproven for --math."""
    text = (MATH / "geglu_fwd_bwd.yaml").read_text()
    text = text.replace("    dw_gu: w_gu\n", "")
    checked = checked_text(text, "t.yaml")
    warn = [w for w in checked.analysis.warnings if "dw_gu" in w.message]
    assert warn and "cannot prove it" in warn[0].message
    report = prove(checked)
    (bad,) = [p for p in report.proofs if not p.ok]
    assert bad.output == "dw_gu" and bad.status == "unproven"
    assert "neither a gradient (backward.grads) nor a recomputed forward value" in bad.note
    (d,) = diagnostics(checked, report)
    assert "a gradient: declare it as 'dw_gu: <forward tensor>' in backward.grads" in d.hint
    assert d.path.startswith("backward.steps[2]")  # at the item that writes dw_gu


def test_small_dims_keep_shape_rules():
    c = small(check_file(ROOT / "specs" / "f7_qk_norm_rope.yaml"))
    sizes = c.spec.dim_sizes()
    assert sizes["D"] % sizes["head_dim"] == 0 and sizes["D"] <= 4096 // 8


def test_math_without_torch_is_a_tool_failure(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "torch" else real(n, *a)
    )
    res = coda_check("--math", ROOT / "specs" / "f8_scale.yaml")
    assert res.exit_code == EXIT_TOOL_FAILURE
    assert "needs PyTorch (the CPU build is enough)" in res.output


def test_help_summaries_are_whole_sentences():
    """``coda --help`` lists each command with a complete one-line summary (no '...')."""
    res = CliRunner().invoke(cli.main, ["--help"])
    block = res.output.split("Commands:", 1)[1].strip().splitlines()
    assert {ln.split()[0] for ln in block} == set(cli.main.commands)
    for ln in block:
        assert ln.rstrip().endswith(".") and not ln.rstrip().endswith("..."), ln


def test_math_shrinks_only_to_dims_a_derive_follows():
    """A derive with a fixed head count cannot follow every shrink: --math picks dims it can."""
    res = coda_check("--math", ROOT / "tests" / "specs_extra" / "ragged_fixed_derive.yaml")
    assert res.exit_code == EXIT_OK, res.output
    assert "forward outputs equal equivalent_to" in res.output


def test_an_input_only_equivalent_to_reads_is_named_so():
    """``never read`` counts equivalent_to's reads (issue 22 item 8): an input no step reads but
    equivalent_to does gets its own warning, located at the tensor; one nothing reads keeps the
    plain one."""
    text = (ROOT / "specs" / "f8_scale.yaml").read_text()
    spec = text.replace("tensors:\n", "tensors:\n  extra: {shape: [M], dtype: fp32}\n", 1)
    only_eq = spec.replace(
        "  y_dev = alpha * (x @ w.T)", "  y_dev = alpha * (x @ w.T) + 0.0 * extra[:, None]"
    )
    for body, want in (
        (spec, "input 'extra' is never read"),
        (only_eq, "input 'extra' is read only by equivalent_to, by no step"),
    ):
        checked = checked_text(body, "t.yaml")
        (w,) = [w for w in checked.analysis.warnings if "'extra'" in w.message]
        assert w.message == want and w.path == "tensors.extra" and w.line > 0


def test_cast_is_proven_when_equivalent_to_states_the_rounding():
    """The proof rounds a ``cast`` (stores stay exact): bf16(...) in equivalent_to proves it."""
    report = prove(check_file(MATH / "cast_proven.yaml"))
    assert report.ok, report.proofs
    assert [p.rel_err for p in report.proofs] == [0.0, 0.0]  # the same rounding, bit for bit


def test_cast_without_the_rounding_in_equivalent_to_fails_located():
    path = MATH / "cast_unstated.yaml"
    assert coda_check(path).exit_code == EXIT_OK
    res = coda_check("--math", path)
    assert res.exit_code == EXIT_MISMATCH, res.output
    line = next(
        i for i, t in enumerate(path.read_text().splitlines(), 1) if t == "  h = silu(x @ w.T)"
    )
    assert f"{path}:{line}:3: error: equivalent_to: forward output 'h' differs" in res.output
    assert re.search(r"rel_err [1-9]\.\d\de-0[34]", res.output)  # one bf16 rounding
    assert "steps[0].epilogue[1] casts to bf16" in res.output
    assert "state it in this line, e.g. bf16(...)" in res.output


def test_rounding_functions_round_to_nearest_even_and_saturate_fp8():
    import torch

    from coda_spec.expr import parse
    from coda_spec.expr.evaluate import evaluate

    x = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 1e9, -1e9, 1.0625], dtype=torch.float64)
    prog = parse("b = bf16(x)\nh = fp16(x)\ne4 = fp8_e4m3(x)\ne5 = fp8_e5m2(x)")
    got = evaluate(prog, {"x": x})
    assert got["b"].dtype == torch.float64
    assert got["b"][:2].tolist() == [1.0, 1 + 2**-6]  # ties to even
    assert got["e4"][2:].tolist() == [448.0, -448.0, 1.0]  # saturating; 1.0625 ties to 1.0
    assert got["e5"][2:4].tolist() == [57344.0, -57344.0]
    assert torch.isinf(got["h"][2])  # fp16 does not saturate: a cast to fp16 overflows


def test_rounding_has_a_straight_through_gradient():
    """vjp through bf16(...) is the gradient at the rounded point (derivative of rounding: 1)."""
    import torch

    from coda_spec.expr import parse
    from coda_spec.expr.evaluate import evaluate

    x = torch.tensor([0.3, -1.7, 2.9], dtype=torch.float64)
    dy = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    got = evaluate(parse("g = vjp(square(bf16(x)), x, dy)"), {"x": x, "dy": dy})["g"]
    want = 2 * x.to(torch.bfloat16).double() * dy
    assert torch.equal(got, want)


RANGED = MATH / "relu2_mlp_ranged.yaml"
RANGE_RE = re.compile(r", cols: \[[^\]]*\]")
# every catalogue and test spec with a column range: (spec, which range) for each range
RANGED_SPECS = sorted(
    p
    for d in ("specs", "tests/specs_extra", "tests/grad_specs", "tests/primitives")
    + ("tests/math_specs",)
    for p in (ROOT / d).glob("*.yaml")
    if RANGE_RE.search(p.read_text())
)
CUTS = [(p, i) for p in RANGED_SPECS for i in range(len(RANGE_RE.findall(p.read_text())))]


def test_a_forgotten_range_fails_the_proof():
    """Issue 31, n18: {squared_relu: z, cols: [0, 2048]} at F = 4096 with equivalent_to
    'h = relu(z) ** 2' (the range forgotten) was 'valid and proven': the proof ran at F = 2048,
    where the range covers the whole tile. It now runs where the range leaves columns out."""
    text = RANGED.read_text().replace("where(arange(F) < 2048, relu(z) ** 2, z)", "relu(z) ** 2")
    checked = checked_text(text, "n18.yaml")
    report = prove(checked, coverage=False)
    assert report.sizes["F"] == 4096 and report.sizes["D"] == 64  # F kept, D still shrunk
    assert [p.output for p in report.proofs if not p.ok] == ["h", "y"]
    right = prove(check_file(RANGED))
    assert right.ok and not right.gaps, right


@pytest.mark.parametrize("path,index", CUTS, ids=[f"{p.stem}-{i}" for p, i in CUTS])
def test_deleting_a_range_fails_the_proof(path, index):
    """Each cols: of every catalogue and test spec is pinned by its proof: without it (the item
    on every column) check --math fails."""
    text = path.read_text()
    cut = list(RANGE_RE.finditer(text))[index]
    mutant = text[: cut.start()] + text[cut.end() :]
    report = prove(checked_text(mutant, path.name), coverage=False)
    assert not report.ok, f"{path.name} proven with {cut.group(0)!r} deleted"


RECOMPUTE = MATH / "geglu_recompute_out.yaml"


def test_a_recomputed_forward_value_is_proven():
    """A backward output that recomputes a forward value (CODA's dGeGLU stores out for the
    weight gradient), declared in backward.recomputes, is proven equal to it; it was refused as
    'not a gradient listed in backward.grads', with a hint to declare it a gradient."""
    res = coda_check("--math", RECOMPUTE)
    assert res.exit_code == EXIT_OK, res.output
    assert "3/3 backward outputs equal autograd" in res.output
    assert "1/1 recomputed values equal the forward" in res.output
    assert "warning" not in res.output  # nor 'value act is never used' (dgeglu's other result)


def test_a_wrong_recomputed_value_fails_at_its_store():
    text = RECOMPUTE.read_text().replace(
        "        - {store: act, to: out_r}",
        "        - {scale: act, by: 2.0, as: act2}\n        - {store: act2, to: out_r}",
    )
    res = coda_check("--math", _write(text))
    assert res.exit_code == EXIT_MISMATCH, res.output
    assert "recomputed value 'out_r' (of 'out') differs from the forward value of 'out'" in (
        res.output
    )
    assert "the backward recomputes something else than 'out'" in res.output


def test_an_undeclared_backward_output_names_both_declarations():
    text = (
        RECOMPUTE.read_text()
        .replace("  recomputes:\n", "")
        .replace(
            "    out_r: out            # a forward value the backward recomputes, not a gradient\n",
            "",
        )
    )
    res = coda_check("--math", _write(text))
    assert res.exit_code == EXIT_MISMATCH, res.output
    assert "backward output 'out_r' is not proven" in res.output
    assert "as 'out_r: <forward tensor>' in backward.recomputes" in res.output


@pytest.mark.parametrize(
    "entry,message",
    [
        ("out_r: nope", "'out_r' recomputes unknown tensor 'nope'"),
        ("dz: z", "'dz' is in backward.grads and backward.recomputes"),
        ("act_r: out", "'act_r' recomputes 'out', but backward.outputs does not list it"),
    ],
)
def test_a_bad_recomputes_entry_is_located(entry, message):
    text = RECOMPUTE.read_text().replace("    out_r: out            #", f"    {entry}  #")
    res = coda_check(_write(text))
    assert res.exit_code == 2 and f"error: backward.recomputes.{entry.split(':')[0]}: " in (
        res.output
    ), res.output
    assert message in res.output


def _write(text: str):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "spec.yaml"
    path.write_text(text)
    return path


def test_a_proof_too_large_for_the_cpu_is_unproven_not_allocated(tmp_path):
    """A dim the proof cannot shrink enough (V = 16M, about 19 GiB in fp64 even at the shrunk
    dims; the audit's fuzz made 1e9) is refused before anything is allocated: every output
    unproven, located, exit 3 (before: check --math allocated until the machine ran out)."""
    text = (ROOT / "specs" / "llama3_last.yaml").read_text()
    path = tmp_path / "big_v.yaml"
    path.write_text(text.replace("V: 128256}", "V: 16000000}"))
    report = prove(check_file(str(path)))
    assert not report.ok and {p.status for p in report.proofs} == {"unproven"}
    assert "would hold about 19.3 GiB (over the 8 GiB a CPU proof may take)" in (
        report.proofs[0].note
    )
    res = coda_check(str(path), "--math")
    assert res.exit_code == EXIT_MISMATCH
    assert "big_v.yaml:82:3: error: equivalent_to: forward output 'lse' is not proven" in (
        res.output
    )
