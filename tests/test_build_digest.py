"""A build's address covers coda's own compile-time code (``coda_spec.lower.digest``): a change
to the code a generated kernel imports, or to the compile worker, is a new build, never a cache
hit on objects compiled from the old code; a docstring or comment change is not."""

from __future__ import annotations

from types import SimpleNamespace

from coda_spec.build import build_hash
from coda_spec.check.frontend import check_file
from coda_spec.config import BuildConfig
from coda_spec.lower import digest
from tests.conftest import ROOT

PAIR_KERNEL = """\
from quack.epilogue.ops import TileStore
from coda_spec.lower.quack_ops import PairF32Store
from coda_spec.lower.quack_private import angle_turns
"""


def test_the_code_a_kernel_imports_and_the_worker_are_covered():
    code = digest.compile_code(PAIR_KERNEL)
    assert {
        "coda_spec.lower.quack_adapter",
        "coda_spec.lower.quack_private",
        "coda_spec.lower.quack_ops",
        "coda_spec.lower.quack_ops.pair_f32",  # through the package's __init__
    } <= set(code)
    assert "coda_spec.lower.triton_aot" not in code
    assert "coda_spec.lower.triton_aot" in digest.compile_code("", aot=("import triton\n",))
    assert not any(m.startswith("coda_spec.dims") for m in code)  # leaves are not followed


def test_imports_are_read_from_the_syntax_tree():
    """A parenthesized import over several lines, and one inside a function, are found."""
    text = (
        "from coda_spec.lower.quack_ops.pair_f32 import (\n    tile_store_params,\n)\n"
        "def f():\n    from coda_spec.lower import kernel_lib\n"
    )
    assert digest._imports(text) == {
        "coda_spec.lower.quack_ops.pair_f32",
        "coda_spec.lower.kernel_lib",
    }


def test_a_code_change_moves_the_digest_and_a_docstring_change_does_not(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""Doc."""\n\ndef f(x):\n    """What f does."""\n    return x + 1  # one\n')
    before = digest._digest(f)
    f.write_text('"""Other doc."""\n\n\ndef f(x):\n    """Said again."""\n    return x + 1\n')
    assert digest._digest(f) == before
    f.write_text('"""Doc."""\n\ndef f(x):\n    return x + 2\n')
    assert digest._digest(f) != before


def test_the_address_moves_with_the_compile_time_code(monkeypatch):
    checked = check_file(ROOT / "specs" / "rmsnorm_chain.yaml")
    lowered = SimpleNamespace(source=PAIR_KERNEL)
    before = build_hash(checked, BuildConfig(), lowered)
    real = digest._digest

    def edited(path):
        return "edited" if path.name == "pair_f32.py" else real(path)

    monkeypatch.setattr(digest, "_digest", edited)
    assert build_hash(checked, BuildConfig(), lowered) != before
