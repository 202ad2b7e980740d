"""``coda bench`` on real kernels (marker ``gpu``): a short run of a forward chain and of the
chain with a backward section, through the CLI, its files read back.

Speed is never asserted here (docs/benchmarks.md shows what a full run measured); these tests
check that every candidate ran, that coda agreed with the eager baseline, and that the results
file round-trips through ``--plot``-free results mode."""

from __future__ import annotations

import pytest

from coda_spec.bench.model import loads
from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu

CHAINS = ["rmsnorm_chain", "b1_dgrad_rmsnorm_bwd", "llama_block"]
# the sustained ruler (the default) with short streams, so the test stays short; and the
# isolated one on the first chain
RULERS = {"sustained": ["--sustain-s", "0.05"], "isolated": ["--isolated"]}
CASES = [(n, "sustained") for n in CHAINS] + [(CHAINS[0], "isolated")]


@pytest.mark.parametrize("name, ruler", CASES, ids=[f"{n}-{r}" for n, r in CASES])
def test_short_bench_runs_every_candidate(name, ruler, tmp_path):
    need_build(name)
    out = tmp_path / "out"
    res = coda_cli(
        "bench",
        f"specs/{name}.yaml",
        "--m",
        "4096",
        "--width",
        "2048",
        "--rounds",
        "3",
        "--out",
        out,
        *RULERS[ruler],
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    run = loads((out / "bench.json").read_text())
    assert run.ruler == ruler and run.flush == ("none" if ruler == "sustained" else "l2")
    dirs = [c.direction for c in run.cases]
    assert dirs == (["fwd", "bwd", "fwd+bwd"] if name == "llama_block" else ["fwd"])
    for case in run.cases:
        assert case.dims["D"] == 2048 and case.dims["M"] == 4096
        for c in case.candidates:
            assert c.stats is not None and c.stats.n == 3, (c.name, c.note)
            assert (c.stats.calls > 0) == (ruler == "sustained"), c
            if run.telemetry:  # the board's clock was read while coda's streams ran
                assert c.stats.clock_mhz is not None, (c.name, run.telemetry)
        assert case.sol_ms > 0
        assert all(k.coda is not None and k.sol is not None for k in case.kernels)
    notes = run.cases[0].notes
    assert notes and notes[0].startswith("coda = eager on"), notes
    if name == "llama_block":  # the backward rows: eager autograd vs coda's 8 gradients
        notes = run.cases[1].notes
        assert notes and notes[0].startswith("coda = eager autograd on 8 output(s)"), notes
    again = coda_cli("bench", out / "bench.json")
    assert again.returncode == 0 and name in again.stdout, again.stderr
