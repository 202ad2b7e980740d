"""QuACK's private names live in ONE adapter (``coda_spec/lower/quack_private.py``).

* The scan (no quack needed): no coda module other than the adapter, and no generated golden
  kernel, names a private (``_``-prefixed) attribute of quack, imports one, or spells one of the
  adapter's pinned private names.
* The pins (skip without quack): every private name the adapter wraps still exists in the
  installed QuACK with the signature and source it was checked against. A QuACK upgrade that
  renames or changes one fails here; re-check the adapter's use of it, then update the pin.
* The compile call (skip without quack): the keywords the compile worker passes to QuACK's
  ``EpiMod.gemm``, the private ``_launch=False`` (compile, no launch) among them, are all in the
  installed QuACK's signature.
"""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from tests.conftest import ROOT, needs_build, source_pin

ADAPTER = ROOT / "coda_spec" / "lower" / "quack_private.py"

# QuACK private attribute -> (signature without annotations, sha256 prefix of its source), as
# checked in quack-kernels 0.6.5.
PINS = {
    ("quack.epilogue.rotary", "_angle_turns"): ("(pos, freq)", "74ef9a5fd4b7e7ee"),
    ("quack.epilogue.rotary", "_sincos_turns"): ("(t, lo)", "8903be741f9db32f"),
    ("quack.gemm_sm90", "GemmSm90._compute_tile_shape_or_override"): (
        "(cta_tile_shape_mnk, atom_layout_mnk, element_type=None, epi_tile_override=None)",
        "3be58510502e2f25",
    ),
    ("quack.gemm_sm90", "GemmSm90._compute_stages"): (
        "(cls, cta_tile_shape_mnk, epi_tile, a_dtype, b_dtype, d_dtype, c_dtype, epilogue_args, "
        "smem_capacity, occupancy, warp_shape_mnk=None, a_bytes_per_stage_override=None, "
        "ab_extra_bytes_per_stage=0)",
        "106d87f0ed58b14d",
    ),
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _quack_private_uses(source: str) -> list[str]:
    """Private quack names ``source`` reaches: ``from quack.x import _y``, ``import quack._x``,
    ``alias._y`` where ``alias`` is bound by a quack import, and string constants spelling a
    pinned private name (``setattr(cls, "_compute_stages", ...)``)."""
    tree = ast.parse(source)
    aliases, hits = set(), []
    pinned = {attr.rsplit(".", 1)[-1] for _, attr in PINS}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "quack":
                    aliases.add(a.asname or a.name.split(".")[0])
                    hits += [a.name] if any(_private(p) for p in a.name.split(".")) else []
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "quack":
            if any(_private(p) for p in node.module.split(".")):
                hits.append(node.module)
            for a in node.names:
                aliases.add(a.asname or a.name)
                hits += [f"{node.module}.{a.name}"] if _private(a.name) else []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in aliases:
                hits.append(f"{root.id}...{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in pinned:
            hits.append(repr(node.value))
    return hits


def test_scan_finds_private_names():
    """The scan itself (so the next test cannot pass by finding nothing)."""
    assert _quack_private_uses("from quack.epilogue.rotary import _angle_turns")
    assert _quack_private_uses("import quack.epilogue.rotary as r\nr._sincos_turns(1, 2)")
    assert _quack_private_uses("from quack.gemm_sm90 import G\nG._compute_stages = 1")
    assert _quack_private_uses("x = '_compute_tile_shape_or_override'")
    assert _quack_private_uses("from quack.epilogue.math import Pair\nPair._lift(1)")
    assert not _quack_private_uses("from quack.epilogue.math import Pair\nPair(1, 2).a")
    assert not _quack_private_uses("import os\nos._exit")


def test_only_the_adapter_names_private_quack_names():
    files = sorted((ROOT / "coda_spec").rglob("*.py"))
    files += sorted((ROOT / "tests" / "golden" / "kernels").glob("*.py"))
    bad = {}
    for path in files:
        if path == ADAPTER:
            continue
        hits = _quack_private_uses(path.read_text())
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    assert not bad, f"private QuACK names outside lower/quack_private.py: {bad}"


def test_the_adapter_lists_exactly_the_pinned_names():
    # quack_private imports quack only inside its functions: importable without the extra
    from coda_spec.lower import quack_private

    assert {(module, attr) for _, module, attr in quack_private.PRIVATE} == set(PINS)


@pytest.mark.slow  # imports quack and cutlass
@needs_build
@pytest.mark.parametrize("module,attr", sorted(PINS), ids=[a for _, a in sorted(PINS)])
def test_private_quack_name_is_unchanged(module, attr):
    pytest.importorskip("quack", reason="needs the [build] extra (quack-kernels)")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        assert hasattr(obj, part), f"QuACK renamed or removed {module}.{attr}"
        obj = inspect.getattr_static(obj, part)
    fn = getattr(obj, "__func__", obj)  # staticmethod / classmethod
    signature, digest = PINS[(module, attr)]
    sig = inspect.signature(fn)
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    plain = str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))
    assert plain == signature, f"QuACK changed the signature of {module}.{attr}: {plain}"
    got = source_pin(fn)
    assert got == digest, (
        f"QuACK changed {module}.{attr} (source hash {got}, pinned {digest}): re-check "
        "coda_spec/lower/quack_private.py's use of it, then update the pin"
    )


def _compile_gemm_keywords() -> set[str]:
    """The keywords ``quack_adapter.compile_one`` passes to QuACK's ``EpiMod.gemm`` (the
    generated fn's ``.gemm(...)``): the call's own and the keys it adds to ``kwargs``."""
    tree = ast.parse((ROOT / "coda_spec" / "lower" / "quack_adapter.py").read_text())
    fn = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "compile_one"
    )
    names = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "gemm":
            names |= {k.arg for k in node.keywords if k.arg is not None}
        elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "kwargs":
            for d in ast.walk(node.value):  # kwargs = {"epi_key_overrides": ...} if ... else {}
                if isinstance(d, ast.Dict):
                    names |= {k.value for k in d.keys if isinstance(k, ast.Constant)}
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            if ast.unparse(node.value) == "kwargs":  # kwargs["post_init_attrs"] = ...
                names.add(node.slice.value)
    return names


def test_the_compile_call_keywords_are_found():
    assert {"_launch", "epi_args", "tile_M", "post_init_attrs", "epi_key_overrides"} <= (
        _compile_gemm_keywords()
    )


@pytest.mark.slow  # imports quack and cutlass
@needs_build
def test_quack_gemm_takes_the_compile_only_keyword():
    """The compile worker compiles without launching through QuACK's private keyword
    ``_launch=False`` (``coda_spec/lower/quack_adapter.py``, ``compile_one``): pinned here with
    every other keyword that call passes, against the installed QuACK's ``EpiMod.gemm``."""
    pytest.importorskip("quack", reason="needs the [build] extra (quack-kernels)")
    from quack.epilogue.frontend import EpiMod

    params = inspect.signature(EpiMod.gemm).parameters
    launch = params.get("_launch")
    assert launch is not None and launch.kind == inspect.Parameter.KEYWORD_ONLY, (
        "QuACK's EpiMod.gemm no longer takes the keyword _launch, which "
        "coda_spec/lower/quack_adapter.py's compile_one passes (_launch=False: compile and "
        "export, no launch); find QuACK's compile-only path (quack/epilogue/frontend.py, "
        "EpiMod.plan) and pass that in compile_one instead"
    )
    assert launch.default is True, f"EpiMod.gemm's _launch defaults to {launch.default!r}"
    missing = sorted(_compile_gemm_keywords() - set(params))
    assert not missing, f"QuACK's EpiMod.gemm takes none of {missing}: update compile_one"
