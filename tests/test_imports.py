"""Function-level imports: each has a reason docs/architecture.md names, and this table counts them.

import-linter (pyproject.toml) checks where imports point; this test checks which imports are
allowed to hide inside a function at all. An import of torch or a compiler (quack, cutlass,
triton, tvm-ffi) or of an optional package (matplotlib; transformers, which coda_spec.nn reads only
for its configs and outputs) may be lazy anywhere: that is how ``coda
check`` stays free of torch and the runtime free of the compiler. Every lazy import of coda's
own modules is listed in :data:`LAZY` with its reason, one of :data:`REASONS`; a new one fails
until it is hoisted to the top of its module or listed here with a reason.
"""

from __future__ import annotations

import ast

from tests.conftest import ROOT

PACKAGE = ROOT / "coda_spec"
EXTERNAL = {
    "torch",
    "quack",
    "cutlass",
    "triton",
    "tvm_ffi",
    "matplotlib",
    "transformers",
    "pynvml",
}
REASONS = {
    "torch": "the module it reaches imports torch, and its importer must not (coda check)",
    "compiler": "the module it reaches drives the compiler (coda build)",
    "cycle": "a cycle that must exist (the registry imports every primitive file)",
    "front end": "the deploy side (runtime, ops, nn) loads no front end at import or on a call",
}
LAZY = {  # (file, imported module) -> reason
    ("__init__.py", "coda_spec.runtime"): "torch",
    ("__init__.py", "coda_spec.ops"): "torch",
    ("cli.py", "coda_spec.build"): "compiler",
    ("cli.py", "coda_spec"): "torch",  # verify; tune
    ("cli.py", "coda_spec.verify"): "torch",  # verify's report
    ("cli.py", "coda_spec.runtime"): "torch",
    ("cli.py", "coda_spec.bench"): "torch",
    ("bench/command.py", "coda_spec.bench.driver"): "torch",
    ("bench/command.py", "coda_spec.bench.baselines"): "torch",
    ("tune.py", "coda_spec.bench.driver"): "torch",
    ("prove/mathcheck.py", "coda_spec.prove.inputs"): "torch",
    ("prove/mathcheck.py", "coda_spec.prove.equivalence"): "torch",
    (
        "prove/mathcheck.py",
        "coda_spec.prove.coverage",
    ): "torch",  # the proof's warnings; small()'s relations
    ("primitives/_elementwise.py", "coda_spec.primitives"): "cycle",
    ("runtime/chain.py", "coda_spec.check.frontend"): "front end",
    ("runtime/chain.py", "coda_spec.check.source"): "front end",
    ("ops.py", "coda_spec.check.frontend"): "front end",  # resized: the spec re-analysed
    ("ops.py", "coda_spec.check"): "front end",  # suits (resized_manifest)
    ("ops.py", "coda_spec.prove"): "front end",  # reference (the CPU path)
}


def _lazy_imports() -> list[tuple[str, str, int]]:
    """(file, module, line) of every import statement inside a function of the package."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and not node.level:
                    out.append((str(path.relative_to(PACKAGE)), node.module, node.lineno))
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        out.append((str(path.relative_to(PACKAGE)), alias.name, node.lineno))
    return sorted(set(out))


def test_every_function_level_import_has_a_reason():
    unexplained = [
        f"coda_spec/{f}:{line}: import {mod}"
        for f, mod, line in _lazy_imports()
        if mod.split(".")[0] not in EXTERNAL and (f, mod) not in LAZY
    ]
    assert not unexplained, (
        "function-level imports without a reason (hoist them to the top of the module, or add "
        "them to LAZY with a reason from REASONS):\n" + "\n".join(unexplained)
    )


def test_the_table_lists_no_import_that_is_gone():
    seen = {(f, mod) for f, mod, _ in _lazy_imports()}
    assert set(LAZY) <= seen, sorted(set(LAZY) - seen)
    assert set(LAZY.values()) <= set(REASONS)


def test_the_count_of_internal_lazy_imports():
    """The number of coda modules imported inside functions: lower it, never raise it silently."""
    internal = [x for x in _lazy_imports() if x[1].split(".")[0] == "coda_spec"]
    assert len(internal) == 28, internal  # 29 before resolve moved beside the front end


def test_architecture_names_every_reason():
    text = (ROOT / "docs" / "architecture.md").read_text()
    for key in REASONS:
        assert f"**{key}**" in text, f"docs/architecture.md does not name the reason '{key}'"
