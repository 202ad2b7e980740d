"""GPU end-to-end (marker ``gpu``; skipped without CUDA): built chains vs the reference.

Runs every bundled spec from its build under
``build/<name>-latest`` (build here, carry ``build`` to the GPU machine) at the real shape
(M = 16384) and a ragged one (M = 1000), and checks each output against the fp64 reference with
verify's bound (docs/verification.md). The LM head's chain runs at the row chunk the model calls
it at instead of M = 16384: its fp64 reference at M = 16384 and V = 128256 holds several
16.8 GB M x V tensors, past the H200's memory (an OutOfMemoryError on 2026-12-03).
"""

from __future__ import annotations

import pytest

from tests.conftest import SPECS, need_build
from tests.gpu.run_chain import compare

REAL_M = {"llama3_lm_head": 2048}  # the row chunk coda_spec.nn calls it at (1B: 512 MiB of logits)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [16384, 1000])
@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_chain_matches_reference(path, m):
    import coda_spec

    chain = coda_spec.load(need_build(path.stem))
    rows = compare(chain, REAL_M.get(path.stem, m) if m == 16384 else m, seed=0)
    bad = [(r["output"], r["max_abs_err"], r["bound"]) for r in rows if not r["pass"]]
    assert bad == []
