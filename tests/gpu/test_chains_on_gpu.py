"""GPU end-to-end (marker ``gpu``; skipped without CUDA): built chains vs the reference.

Runs every bundled spec that has a build under ``build/<name>-latest`` (build here, carry
``build`` to the GPU machine) at the real shape (M = 16384) and a ragged one (M = 1000), and
checks each output against the fp64 reference with the DESIGN §7 bound.
"""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, SPECS
from tests.gpu.run_chain import compare

BUILT = [p for p in SPECS if (ROOT / "build" / f"{p.stem}-latest" / "manifest.json").is_file()]


@pytest.mark.gpu
@pytest.mark.parametrize("m", [16384, 1000])
@pytest.mark.parametrize("path", BUILT, ids=[p.stem for p in BUILT])
def test_chain_matches_reference(path, m):
    import coda_spec

    chain = coda_spec.load(ROOT / "build" / f"{path.stem}-latest")
    rows = compare(chain, m, seed=0)
    bad = [(r["output"], r["max_abs_err"], r["bound"]) for r in rows if not r["pass"]]
    assert bad == []
