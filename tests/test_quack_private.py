"""QuACK's private names live in ONE adapter (``coda_spec/lower/quack_private.py``).

* The scan (no quack needed): no coda module other than the adapter, and no generated golden
  kernel, names a private (``_``-prefixed) attribute of quack, imports one, or spells one of the
  adapter's pinned private names.
* The pins (skip without quack): every private name the adapter wraps still exists in the
  installed QuACK with the signature and source it was checked against. A QuACK upgrade that
  renames or changes one fails here; re-check the adapter's use of it, then update the pin.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect

import pytest

from tests.conftest import ROOT, needs_build

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
    got = hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]
    assert got == digest, (
        f"QuACK changed {module}.{attr} (source hash {got}, pinned {digest}): re-check "
        "coda_spec/lower/quack_private.py's use of it, then update the pin"
    )
