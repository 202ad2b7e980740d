"""The fresh chains of issue 21's untuned-vs-tuned check (benchmarks/fresh_chains/) stay valid:
each checks clean, its math equals its ``equivalent_to`` in fp64, and it lowers at the untuned
pick and at every candidate of ``benchmarks/fresh_candidates.txt`` (what the H200 run built; its
first, issue 21's untuned pick, is the fallback)."""

from __future__ import annotations

import pytest

from coda_spec.check.frontend import check_file
from coda_spec.config import DEFAULT, parse_configs
from coda_spec.lower.module import lower_variants
from tests.algebra import all_checks, sizes_of, small
from tests.conftest import ROOT

FRESH = sorted((ROOT / "benchmarks" / "fresh_chains").glob("*.yaml"))
CANDIDATES = (ROOT / "benchmarks" / "fresh_candidates.txt").read_text().strip()


def test_there_are_four():
    assert len(FRESH) == 4


@pytest.mark.parametrize("path", FRESH, ids=lambda p: p.stem)
def test_a_fresh_chain_is_proven(path):
    checked = small(check_file(path))
    results = all_checks(checked, sizes_of(checked))
    assert results and [(c.output, c.rel_err) for c in results if not c.ok] == []


@pytest.mark.parametrize("path", FRESH, ids=lambda p: p.stem)
def test_a_fresh_chain_lowers_at_every_candidate(path):
    configs = parse_configs(CANDIDATES)
    assert DEFAULT in configs  # the untuned pick is one of them (issue 21's was the first)
    _, variants, dropped = lower_variants(check_file(path), configs)
    assert dropped == []
    assert all(len(v) == len(configs) for v in variants.values())
