"""Unit tests of the small pieces: dims, did-you-mean, the equivalence language, the loader."""

from __future__ import annotations

import pytest

from coda_spec.check.source import parse_text
from coda_spec.dims import DimError, evaluate, fold
from coda_spec.errors import Diagnostic, did_you_mean, format_path, render_text
from coda_spec.expr import ExprError, check, free_names, parse, uses_vjp

SIZES = {"M": None, "D": 4096, "F": 11008, "hd": 128}


@pytest.mark.parametrize(
    "expr,want",
    [
        (8, 8),
        ("D", 4096),
        ("M", "M"),
        ("2*F", 22016),
        ("D/hd", 32),
        ("D // hd", 32),
        ("D + 8", 4104),
        ("3*D - D", 8192),
    ],
)
def test_fold(expr, want):
    assert fold(expr, SIZES) == want


@pytest.mark.parametrize(
    "expr,fragment",
    [
        ("Q", "unknown dim 'Q'"),
        ("2*M", "dynamic dim 'M'"),
        ("D/3", "not an exact integer"),
        ("D-D", "must be positive"),
        ("D**2", "unsupported"),
        ("(", "cannot parse"),
        (0, "positive"),
        (True, "not an integer"),
    ],
)
def test_fold_errors(expr, fragment):
    with pytest.raises(DimError, match=None) as e:
        fold(expr, SIZES)
    assert fragment in str(e.value)


def test_evaluate_needs_concrete_sizes():
    assert evaluate("M", {"M": 100}) == 100
    with pytest.raises(DimError):
        evaluate("M", {"M": None})


@pytest.mark.parametrize(
    "word,pool,want",
    [
        ("rleu", ["relu", "gelu", "exp"], "'relu'"),
        ("kernal", ["kernel", "host"], "'kernel'"),
        ("bf61", ["bf16", "fp16"], "'bf16'"),
        ("zzzz", ["relu"], ""),
    ],
)
def test_did_you_mean(word, pool, want):
    assert want in did_you_mean(word, pool) if want else did_you_mean(word, pool) == ""


def test_format_path_and_render():
    assert format_path(("steps", 0, "epilogue", 1)) == "steps[0].epilogue[1]"
    assert format_path(()) == "<root>"
    d = Diagnostic("x.yaml", 2, 5, "steps[0]", "bad", "did you mean 'y'?")
    text = render_text(d, ["coda: 1", "abcdefg"])
    assert text.splitlines() == [
        "x.yaml:2:5: error: steps[0]: bad; did you mean 'y'?",
        "    abcdefg",
        "        ^",
    ]


def test_program_parse_and_check():
    prog = parse("x1 = x + y @ w.T\nout = rms_norm(x1, g, 1e-6)")
    assert prog.targets == ("x1", "out")
    assert free_names(prog) == {"x", "y", "w", "g"}
    assert check(prog, {"x", "y", "w", "g"}, set()) == []
    assert not uses_vjp(prog)


@pytest.mark.parametrize(
    "text,fragment,line",
    [
        ("a = rms_nrom(x)", "unknown function 'rms_nrom'", 1),
        ("a = x\nb = h + 1", "unknown name 'h'", 2),
        ("a = (x", "syntax error", 1),
        ("x + 1", "name = expression", 1),
        ("a = [i for i in x]", "ListComp", 1),
        ("a = x.__class__", "unknown attribute", 1),
        ("a = vjp(x * 2, x * 2, x)", "vjp", 1),
        ("x = x * 2", "chain input", 1),
    ],
)
def test_program_errors(text, fragment, line):
    try:
        errs = check(parse(text), {"x"}, set())
    except ExprError as e:
        errs = [e]
    assert errs and fragment in errs[0].message + errs[0].hint and errs[0].line == line


def test_loader_positions_and_float_fix():
    src = parse_text("t.yaml", "a:\n  b: [1, 2]\n  eps: 1e-6\n  on: yes\n")
    assert src.data == {"a": {"b": [1, 2], "eps": 1e-6, "on": True}}
    assert src.where(("a", "b", 1)) == (2, 10)
    assert src.where(("a", "eps"), key=True) == (3, 3)
    assert "on" in src.data["a"]  # keys stay text: 'on' is not the boolean True


def test_loader_reports_duplicate_keys_with_both_places():
    from coda_spec.errors import SpecError

    with pytest.raises(SpecError) as e:
        parse_text("t.yaml", "a: 1\nb: 2\na: 3\n")
    (d,) = e.value.diagnostics
    assert (d.line, d.col) == (3, 1) and "duplicate key 'a'" in d.message
    assert "line 1, column 1" in d.hint


def test_step_ops_is_the_one_op_list_accessor():
    # a kernel's epilogue, a host step's body, nothing for a finalize; with_ops rebuilds the same
    # field, and the accessor adds no dataclass field (goldens, equality and hashing unchanged)
    from dataclasses import fields

    from coda_spec.ir import Finalize, Gemm, Host, Kernel, Loc, Op, Operand, to_data

    loc = Loc(1, 1, ("steps", 0))
    a, b = (
        Op("load_col", (("load_col", "x"),), ("v",), loc),
        Op("store", (("store", "v"),), (), loc),
    )
    kernel = Kernel("k", Gemm(Operand("x", False), Operand("w", True), loc), (a,), loc=loc)
    host = Host("h", "x", (b,), loc=loc)
    fin = Finalize("sum", "p", "s", loc=loc)
    assert (kernel.ops, host.ops, fin.ops) == ((a,), (b,), ())
    assert (kernel.ops_field, host.ops_field, fin.ops_field) == ("epilogue", "body", None)
    assert kernel.with_ops((a, b)).epilogue == (a, b) and host.with_ops(()).body == ()
    for step in (kernel, host, fin):
        assert "ops" not in {f.name for f in fields(step)} and "ops_field" not in to_data(step)


def test_a_partial_is_read_by_name():
    # TensorInfo.partial: named facts (kind, reduce, width, group, rows), still the plain tuple
    # it was (a NamedTuple), so any serialized form of it is unchanged
    from pathlib import Path

    from coda_spec.check.facts import Partial
    from coda_spec.check.frontend import check_file

    spec = Path(__file__).resolve().parents[1] / "specs" / "f6_lse.yaml"
    part = check_file(spec).analysis.tensor("lse_part").partial
    assert isinstance(part, Partial) and isinstance(part, tuple)
    assert (part.kind, part.reduce, part.width, part.group, part.rows) == (
        "rowpart",
        "logsumexp",
        32768,
        None,
        "M",
    )
    assert list(part) == ["rowpart", "logsumexp", 32768, None, "M"]


def test_one_identifier_rule_for_generated_names():
    # coda_spec.idents.ident: the rule behind LowerCtx.ident, HostCtx.ident and the finalize
    # kernels' entry names; a spec name (an identifier by the schema) only gets a trailing _
    # where it would clash with the generated module
    from coda_spec.idents import ident
    from coda_spec.lower.finalize_kernel import TAKEN
    from coda_spec.primitives.host_api import HostCtx
    from coda_spec.primitives.lower_api import LowerCtx

    assert ident("x") == "x" and ident("lambda") == "lambda_" and ident("tl", {"tl"}) == "tl_"
    assert ident("_qv", private="_q") == "_qv_" and ident("_qv") == "_qv"
    assert ident("a-b.c") == "a_b_c" and ident("2x") == "_2x"
    assert (LowerCtx.ident("acc"), LowerCtx.ident("_q1"), LowerCtx.ident("tl")) == (
        "acc_",
        "_q1_",
        "tl",
    )
    assert (HostCtx.ident("tl"), HostCtx.ident("_q1"), HostCtx.ident("acc")) == (
        "tl_",
        "_q1",
        "acc",
    )
    assert ident("triton", TAKEN) == "triton_" and ident("finalize_lse", TAKEN) == "finalize_lse"
