"""Manifest format 6: shapes are expressions over the spec's dims (CPU, no compile).

* ``coda_spec.dims.Sym``: an int carrying the expression it was folded from; arithmetic keeps
  the text, everything else is the plain int's (printing, JSON, hashing, equality).
* Every shape a manifest records is an expression (``"D"``, ``"2*F"``, ``"cdiv(D,256)"``), an int
  only for a literal of the spec.
* Re-sizing without re-lowering is exact: for every bundled spec, the manifest written at the
  declared dims (``tests.test_verify_cpu.fake_manifest``: the real writer, fabricated compile
  records), evaluated at verify's ragged dims, equals a fresh lowering at those dims -- and so
  does ``verify.run.resized_manifest``, which lowers nothing.
* The layers: ``coda_spec.artifact`` (the format the runtime reads) and ``coda_spec.verify``
  import nothing from ``coda_spec.lower``; the artifact nothing from ``coda_spec.primitives``.
"""

from __future__ import annotations

import ast
import copy
import json
import pickle
import subprocess
import sys

import pytest

from coda_spec import artifact, dims
from coda_spec.check.frontend import check_file, with_dims
from coda_spec.dims import Sym, cdiv, evaluator, expr_of, fold
from coda_spec.verify import run as V
from tests.conftest import ROOT, SPECS
from tests.test_verify_cpu import FakeChain, fake_manifest

RAGGED_M = 1000
SIZES = {"D": 4096, "F": 11008, "M": None, "h": 128}


# -- Sym ---------------------------------------------------------------------------------------


def test_fold_gives_syms_for_static_dims_only():
    d, f, m = fold("D", SIZES), fold("2 * F", SIZES), fold("M", SIZES)
    assert type(d) is Sym and (d, d.expr) == (4096, "D")
    assert type(f) is Sym and (f, f.expr) == (22016, "2*F")
    assert m == "M"
    assert type(fold(128, SIZES)) is int and type(fold("128", SIZES)) is int  # literals


def test_sym_is_the_plain_int_everywhere_but_its_text():
    d = fold("D", SIZES)
    assert str(d) == repr(d) == f"{d}" == "4096" and f"{d:>6}" == "  4096"
    assert json.dumps([d, {"x": d}]) == '[4096, {"x": 4096}]'
    assert d == 4096 and hash(d) == hash(4096) and {d, 4096} == {4096}
    assert int(d) == 4096 and type(int(d)) is int
    assert copy.deepcopy({"s": (d,)})["s"][0].expr == "D"
    assert pickle.loads(pickle.dumps(d)).expr == "D"


@pytest.mark.parametrize(
    "make, text, value",
    [
        (lambda d, f, h: d // 2, "D/2", 2048),
        (lambda d, f, h: d / 2, "D/2", 2048),
        (lambda d, f, h: 2 * f, "2*2*F", 44032),
        (lambda d, f, h: d + f, "D+2*F", 26112),
        (lambda d, f, h: d - (f - d), "D-(2*F-D)", -13824),
        (lambda d, f, h: (d + f) * 3, "(D+2*F)*3", 78336),
        (lambda d, f, h: d // h, "D/h", 32),
        (lambda d, f, h: d // (h * 2), "D/(h*2)", 16),
        (lambda d, f, h: d * (f // 2), "D*(2*F/2)", 4096 * 11008),
        (lambda d, f, h: 8192 - d, "8192-D", 4096),
        (lambda d, f, h: cdiv(d, 256), "cdiv(D,256)", 16),
        (lambda d, f, h: cdiv(f // 2, h), "cdiv(2*F/2,h)", 86),
    ],
)
def test_sym_arithmetic_keeps_an_expression_that_evaluates_back(make, text, value):
    d, f, h = fold("D", SIZES), fold("2*F", SIZES), fold("h", SIZES)
    x = make(d, f, h)
    assert type(x) is Sym and x.expr == text and x == value
    assert evaluator(x.expr)({"D": 4096, "F": 11008, "h": 128}) == value
    other = {"D": 2048, "F": 1024, "h": 64}  # the text re-sizes: not the folded value
    assert evaluator(x.expr)(other) == make(*(fold(n, other) for n in ("D", "2*F", "h")))


def test_what_is_not_a_dim_expression_is_a_plain_int():
    d = fold("D", SIZES)
    for x in (d // 3, d % 7, -d, abs(d), d**2, d * -1, d + -3, max(d, 1) + 0.5):
        assert type(x) is not Sym, x
    assert d // 3 == 1365 and d / 3 == 4096 / 3 and type(d / 3) is float
    assert type(True + d) is int  # a bool is no literal


def test_cdiv_and_expr_of():
    assert cdiv("M", 128) == "cdiv(M,128)" and cdiv(1000, 128) == 8
    assert type(cdiv(1000, 128)) is int
    d = fold("D", SIZES)
    assert [expr_of(x) for x in (d, 7, "M", cdiv(d, 128))] == ["D", 7, "M", "cdiv(D,128)"]
    assert dims.exprs({"a": [d, (cdiv(d, 256), "M")]}) == {"a": ["D", ["cdiv(D,256)", "M"]]}
    # only the shape paths get the text; any other Sym (a baked constant) its plain int
    out = dims.exprs({"shape": [d], "lanes": d // 64}, (("shape",),))
    assert out == {"shape": ["D"], "lanes": 64} and type(out["lanes"]) is int


def test_the_evaluator_takes_cdiv_but_a_spec_does_not():
    assert evaluator("cdiv(M,128)")({"M": 0}) == 0
    assert evaluator("cdiv(2*D,256)")({"D": 1000}) == 8
    with pytest.raises(dims.DimError, match="unsupported dim expression"):
        fold("cdiv(D,2)", SIZES)
    with pytest.raises(dims.DimError, match="not an exact integer"):
        evaluator("D/3")({"D": 1000})


# -- the manifest ------------------------------------------------------------------------------


def _shape_entries(manifest: dict) -> list:
    """(path, entry) of every shape entry of a manifest (``artifact.SHAPES``)."""
    out: list = []

    def walk(node, paths, where):
        if any(not p for p in paths):
            out.append((where, node))
            return
        items = (
            node.items()
            if isinstance(node, dict)
            else enumerate(node)
            if isinstance(node, list)
            else ()
        )
        for k, v in items:
            walk(v, dims._below(paths, k), (*where, k))

    walk(manifest, artifact.SHAPES, ())
    return out


def _at(manifest: dict, sizes: dict) -> dict:
    """Every shape entry of ``manifest`` evaluated at ``sizes``: {path: value}."""

    def value(e):  # a launch grid's {"extent": ...} is evaluated at the launch, not here
        return e if e is None or isinstance(e, dict) else evaluator(e)(sizes)

    return {
        where: tuple(map(value, entry)) if isinstance(entry, list) else value(entry)
        for where, entry in _shape_entries(manifest)
    }


def test_shapes_in_a_manifest_are_expressions():
    checked = check_file(ROOT / "specs" / "b1_dgrad_rmsnorm_bwd.yaml")
    m = json.loads(json.dumps(fake_manifest(checked)))  # as written and read back
    assert m["format"] == artifact.FORMAT_VERSION == 9
    assert m["dims"] == {"M": None, "D": 4096, "F": 11008}
    shapes = {t["name"]: t["shape"] for t in m["inputs"]}
    assert shapes["dz"] == ["M", "2*F"] and shapes["w_next"] == ["2*F", "D"]
    (kernel,) = [s for s in m["steps"] if s["kind"] == "kernel"]
    assert (kernel["m"], kernel["n"], kernel["k"]) == ("M", "D", "2*F")
    fields = {f["tensor"]: f["shape"] for f in kernel["variants"][0]["fields"]}
    assert fields["dgamma_part"] == ["cdiv(M,128)", "D"] and fields["gamma"] == [1, "D"]
    entries = [e for _, e in _shape_entries(m)]
    assert entries and not any(isinstance(x, int) and x > 1 for e in entries for x in _flat(e))


def _flat(entry):
    return entry if isinstance(entry, list) else [entry]


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_manifest_shapes_resize_like_a_fresh_lowering(path):
    """The manifest written at the declared dims, evaluated at the ragged dims, equals the
    manifest of a fresh lowering at the ragged dims, shape entry by shape entry; so does
    verify's re-sized manifest (no lowering), whose ``dims`` are the ragged ones."""
    checked = check_file(path.relative_to(ROOT))
    ragged = V.ragged_dims(checked)
    sizes = {**checked.spec.dim_sizes(), **ragged}
    sizes = {k: (RAGGED_M if v is None else v) for k, v in sizes.items()}
    built = fake_manifest(checked)
    case = with_dims(checked, ragged) if ragged else checked
    fresh = fake_manifest(case)
    want = _at(fresh, sizes)
    assert want and _at(built, sizes) == want
    resized = V.resized_manifest(FakeChain(checked, None, manifest=built), case, checked)
    assert dict(resized.dims) == {d.name: d.size for d in case.spec.dims}
    dyn = {k: RAGGED_M for k, v in resized.dims.items() if v is None}
    fresh_typed = artifact.Manifest.from_data(fresh)
    assert _typed_at(resized, {**resized.static, **dyn}) == _typed_at(fresh_typed, sizes)


def _typed_at(m, sizes: dict) -> dict:
    """A typed manifest's tensor and variant-field shapes evaluated at ``sizes``."""
    out = {("tensors", n): artifact.eval_shape(t.shape, sizes) for n, t in m.tensors.items()}
    for s in m.kernel_steps():
        for v in s.variants:
            for f in v.fields:
                out[s.name, v.name, f.name] = artifact.eval_shape(f.shape, sizes)
    return out


@pytest.mark.slow
def test_artifact_and_verify_do_not_import_the_lowering():
    """The format the runtime reads imports neither the lowering nor the primitives, not even
    inside a function; verify re-sizes without the lowering (it may ask the primitives)."""
    for module, banned in (
        ("artifact/__init__.py", ("coda_spec.lower", "coda_spec.primitives")),
        *(
            (f"runtime/{p.name}", ("coda_spec.lower", "coda_spec.primitives"))
            for p in sorted((ROOT / "coda_spec" / "runtime").glob("*.py"))
        ),
        ("verify/run.py", ("coda_spec.lower",)),
    ):
        tree = ast.parse((ROOT / "coda_spec" / module).read_text())
        names = [
            n.module if isinstance(n, ast.ImportFrom) else a.name
            for n in ast.walk(tree)
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in (n.names if isinstance(n, ast.Import) else [None])
        ]
        bad = [n for n in names if n and any(n == b or n.startswith(b + ".") for b in banned)]
        assert not bad, f"coda_spec/{module} imports {bad}"
    code = (
        "import sys, coda_spec.artifact, coda_spec.runtime\n"
        "bad = [m for m in sys.modules if m.startswith(('coda_spec.lower', "
        "'coda_spec.primitives', 'coda_spec.artifact.manifest'))]\n"
        "assert not bad, bad\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]


EVALUATED = [  # (expression, sizes): what the one evaluator computes, fast path and errors alike
    ("D", {"D": 4096}),
    ("2*F", {"F": 11008}),
    ("D/2", {"D": 4096}),
    ("D/3", {"D": 4096}),  # inexact: DimError
    ("D/h", {"D": 4096, "h": 0}),  # by zero: DimError
    ("cdiv(M,128)", {"M": 1000}),
    ("cdiv(M,128)", {"M": 0}),
    ("cdiv(2*D-8,256)+F*3", {"D": 1000, "F": 7}),
    ("cdiv(D,h)", {"D": 64, "h": 0}),  # cdiv by 0: DimError
    ("D+X", {"D": 1}),  # unknown dim: DimError naming it
    ("D*M", {"D": 2, "M": None}),  # a dynamic dim inside an expression: DimError
    ("(D-F)*(D+F)", {"D": 9, "F": 4}),
]


@pytest.mark.parametrize("expr, sizes", EVALUATED, ids=[e for e, _ in EVALUATED])
def test_the_compiled_evaluator_is_the_tree_walk(expr, sizes):
    """``dims.evaluator`` builds closures once; every value and every error is the tree walk's
    (``dims._eval``), message included."""
    node = dims._parse(expr)
    try:
        want = dims._eval(node, sizes, expr, calls=True)
    except dims.DimError as e:
        with pytest.raises(dims.DimError) as got:
            evaluator(expr)(sizes)
        assert str(got.value) == str(e) and got.value.hint == e.hint
    else:
        assert evaluator(expr)(sizes) == want
