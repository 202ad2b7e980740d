"""The lowering APIs' layering (``coda_spec/primitives/lower_api.py``,
``coda_spec/primitives/host_api.py``) and
their resource methods.

Import contract (one way): ``lower.module`` / ``lower.emit`` / ``lower.host_kernel`` ->
``primitives`` -> ``primitives.lower_api`` | ``primitives.host_api``.
Checked over every ``import`` statement, function-level ones included (a function-level import
hides a cycle from a module-level check, which is how the old ``primitives -> lower.emit``
imports went unnoticed). The project-wide contract is import-linter's, in pyproject.toml
(:func:`test_import_contract_holds`; CI runs ``lint-imports`` too).
"""

from __future__ import annotations

import ast
import shutil
import subprocess

import pytest

from coda_spec.check.frontend import check_source
from coda_spec.check.source import parse_text
from coda_spec.config import BuildConfig
from coda_spec.errors import ItemError, SpecError
from coda_spec.lower.host_kernel import HostKernelError, host_kernel
from coda_spec.lower.module import lower_spec
from coda_spec.primitives import lower_api as api
from coda_spec.primitives import registry
from tests.conftest import ROOT

PKG = ROOT / "coda_spec"


def _imports(path) -> set[str]:
    """Every module ``path`` imports, at any depth of the file (functions included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _module(path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_primitives_import_the_apis_never_the_walk():
    for path in sorted((PKG / "primitives").glob("*.py")):
        bad = {m for m in _imports(path) if _under(m, "coda_spec.lower")}
        assert not bad, f"{_module(path)} imports {sorted(bad)}: primitives lower through the APIs"


@pytest.mark.parametrize("api_file", ["primitives/lower_api.py", "primitives/host_api.py"])
def test_the_apis_import_neither_primitives_nor_the_walk_nor_a_compiler(api_file):
    mods = _imports(PKG / api_file)
    for forbidden in (
        "coda_spec.primitives",
        "coda_spec.lower",
        "quack",
        "cutlass",
        "triton",
        "torch",
    ):
        assert not any(_under(m, forbidden) for m in mods), (forbidden, mods)


def test_every_primitive_without_a_host_lowering_says_why():
    for name, p in registry().items():
        if p.host is None:
            assert len(p.no_host) > 20, f"primitive '{name}' has no host and no no_host reason"
        else:
            assert not p.no_host, f"primitive '{name}' has a host lowering and a no_host reason"


def test_a_host_refusal_quotes_the_primitives_reason():
    """A primitive with no host lowering in a host body: the host kernel refuses it, quoting the
    primitive's own reason (``coda check`` gives the same refusal: tests/test_host_kernel.py)."""
    text = SHADOW.replace(
        "steps:\n",
        "steps:\n  - host: h\n    over: x\n    body:\n"
        "      - {load_tile: x}\n      - {prepass: mean, of: x, as: mu}\n"
        "      - {sub: [x, mu], as: xc}\n      - {store: xc, to: c}\n",
    ).replace("outputs: {y: bf16}", "outputs: {y: bf16, c: bf16}")
    checked = check_source(parse_text("x.yaml", text))
    with pytest.raises(HostKernelError) as info:
        host_kernel(checked, "h")
    assert registry()["prepass"].no_host in str(info.value)


def test_emit_reaches_primitives_only_through_the_registry_it_is_given():
    """emit imports the lowering contract it assembles against, and no primitive."""
    mods = _imports(PKG / "lower" / "emit.py")
    api = "coda_spec.primitives.lower_api"
    assert any(_under(m, api) for m in mods), mods
    assert not any(_under(m, "coda_spec.primitives") and not _under(m, api) for m in mods), mods
    assert not any(_under(m, "coda_spec.lower.module") for m in mods), mods


def _lint_imports(root) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(ROOT / ".venv" / "bin")) or shutil.which(
        "lint-imports"
    )
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    return subprocess.run(
        [exe, "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300
    )


def test_import_contract_holds():
    """The project's import contract (pyproject.toml, ``[tool.importlinter]``; CI also runs
    ``lint-imports`` on its own). import-linter sees function-level imports too."""
    res = _lint_imports(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize(
    "module, probe",
    [
        ("artifact.builddir", "from coda_spec.lower import module"),  # deploy side to lowering
        ("primitives.host_api", "from coda_spec.primitives.base import Primitive"),  # API upward
        ("check.source", "from coda_spec.check import analyze"),  # a stage to a later stage
    ],
)
def test_import_contract_fails_on_a_hidden_upward_import(tmp_path, module, probe):
    """A function-level import from a lower layer into a higher one breaks the contract: the
    check is not vacuous."""
    copy = tmp_path / "repo"
    shutil.copytree(PKG, copy / "coda_spec", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    path = copy / "coda_spec" / f"{module.replace('.', '/')}.py"
    path.write_text(path.read_text() + f"\n\ndef _probe():\n    {probe}\n")
    res = _lint_imports(copy)
    assert res.returncode != 0
    assert f"coda_spec.{module}" in res.stdout and "BROKEN" in res.stdout


def test_prepass_capable_primitives_are_declared():
    prims = registry()
    declared = {n for n, p in prims.items() if p.prepass}
    assert declared == {"load_col", "load_row", "load_scalar", "load_tile"}


def test_reserved_names_cover_every_importable_name():
    for name in api.SOURCE_OF:
        assert api.LowerCtx.ident(name) == f"{name}_", name


SHADOW = """\
coda: 1
name: shadow
dims: {M: dynamic, D: 256, N: 512}
tensors:
  x: {shape: [M, D], dtype: bf16}
  w: {shape: [N, D], dtype: bf16}
steps:
  - kernel: k
    gemm: {a: x, b: w.T}
    epilogue:
      - {silu: acc, as: silu}
      - {tanh: silu, as: pack}
      - {store: pack, to: y}
outputs: {y: bf16}
"""


def test_a_value_named_like_an_import_never_shadows_it():
    source = lower_spec(check_source(parse_text("x.yaml", SHADOW)), BuildConfig()).source
    assert "    silu_ = silu(acc)\n" in source
    assert "    pack_ = tanh(silu_)\n" in source
    assert "from quack.activation import silu, tanh" in source


def test_use_refuses_a_name_kernel_py_cannot_import():
    checked = check_source(parse_text("x.yaml", SHADOW))
    step = checked.spec.steps[0]
    lc = api.LowerCtx(checked.analysis, step, [], "plain", "M", 512, 256, (128, 256), "x", {})
    assert lc.use("cute.math.exp") == "cute.math.exp"
    with pytest.raises(ItemError, match="not importable"):
        lc.use("_sincos_turns")
    assert lc.declared().imports == {"cute"}


def test_ungathered_select_is_still_refused():
    text = SHADOW.replace(
        "      - {silu: acc, as: silu}\n",
        "      - {silu: acc, as: silu}\n      - {gather_col: acc, index: t, as: picked}\n",
    ).replace("  w: {shape", "  t: {shape: [M], dtype: int32, range: [0, N]}\n  w: {shape")
    with pytest.raises(SpecError, match="gathered value 'picked' is never stored"):
        lower_spec(check_source(parse_text("x.yaml", text)), BuildConfig())


def test_generated_goldens_are_ruff_clean():
    """Generated modules are formatted as ruff formats hand-written code (long spec-line
    comments aside)."""
    ruff = shutil.which("ruff", path=str(ROOT / ".venv" / "bin")) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    files = [str(p) for p in sorted((ROOT / "tests" / "golden" / "kernels").glob("*.py"))]
    fmt = subprocess.run(
        [ruff, "format", "--isolated", "--line-length", "100", "--check", *files],
        capture_output=True,
        text=True,
    )
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    lint = subprocess.run(
        [ruff, "check", "--isolated", "--line-length", "100"]
        + ["--select", "E,F,W,I,B,UP", "--ignore", "E501", *files],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_kernel_helpers_are_loaded_only_by_generated_code_and_the_compile_driver():
    """kernel_lib imports quack/cutlass: no coda module imports it (generated kernel.py does,
    inside compile workers); quack_private only the compile driver (its sm90 hook names)."""
    allowed = {
        "coda_spec.lower.kernel_lib": set(),
        "coda_spec.lower.quack_private": {"coda_spec.lower.quack_adapter"},
    }
    for path in sorted(PKG.rglob("*.py")):
        mods = _imports(path)
        for lib, who in allowed.items():
            if _module(path) not in who:
                assert not any(_under(m, lib) for m in mods), (_module(path), lib)


def test_triton_dtype_names_live_in_the_dtype_table():
    """``tl.bfloat16`` and friends are columns of ``coda_spec.dtypes.DTYPES``; no other module
    of the package spells one as a string (generated text reads them from the table)."""
    from coda_spec.dtypes import DTYPES

    names = [d.triton for d in DTYPES if d.triton] + [d.triton_ptr for d in DTYPES if d.triton]
    assert "tl.bfloat16" in names and "*i32" in names
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "dtypes.py":
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        spelled = {
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and id(n) not in docs and n.value in names
        }
        assert not spelled, (_module(path), spelled)
