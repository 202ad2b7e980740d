"""The bundled catalogue: every spec checks clean, matches its golden IR, and its math is right.

Algebra (fp64, small dims, fixed seed): the spec's own math equals its ``equivalent_to``; backward
sections equal torch.autograd of the forward; and every single-primitive mutation or perturbation
of every spec is caught by those checks (no dead or unchecked math).
"""

from __future__ import annotations

import json

import pytest

from coda_spec.check.frontend import check_file
from coda_spec.ir import to_data
from tests.algebra import all_checks, mutation_report, sizes_of, small
from tests.conftest import ROOT, SPECS, assert_golden

IDS = [p.stem for p in SPECS]
REQUIRED = (
    "f1_",
    "f2_",
    "f3_",
    "f4_",
    "f5_",
    "f6_",
    "f7_",
    "f8_",
    "b1_",
    "b2_",
    "b3_",
    "b4_",
    "llama_block",
)


def test_catalogue_covers_every_coda_chain():
    for prefix in REQUIRED:
        assert any(p.name.startswith(prefix) for p in SPECS), f"no bundled spec for {prefix}"


@pytest.mark.parametrize("path", SPECS, ids=IDS)
def test_spec_checks_clean(path):
    checked = check_file(path)
    assert [w.message for w in checked.analysis.warnings] == []


def _analysis_facts(a) -> dict:
    steps = list(a.steps) + list(a.backward_steps)
    return {
        "tensors": {
            t.name: {
                "shape": list(t.shape),
                "dtype": t.dtype,
                "origin": t.origin,
                "producer": t.producer,
            }
            for t in a.tensors
        },
        "steps": [
            {
                "name": s.name,
                "kind": s.kind,
                "mode": s.mode,
                "reads": list(s.reads),
                "writes": list(s.writes),
                "values": {n: v.show() for n, v in s.values},
            }
            for s in steps
        ],
    }


@pytest.mark.parametrize("path", SPECS, ids=IDS)
def test_golden_ir(path):
    checked = check_file(path)
    data = {"ir": to_data(checked.spec), "analysis": _analysis_facts(checked.analysis)}
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    assert_golden(ROOT / "tests" / "golden" / "ir" / f"{path.stem}.json", text)


@pytest.mark.slow
@pytest.mark.parametrize("path", SPECS, ids=IDS)
def test_spec_math_equals_unfused_math(path):
    checked = small(check_file(path))
    results = all_checks(checked, sizes_of(checked))
    assert results, "the spec compares no output with equivalent_to"
    bad = [(c.output, c.rel_err) for c in results if not c.ok]
    assert bad == []


@pytest.mark.slow
@pytest.mark.parametrize("path", SPECS, ids=IDS)
def test_every_mutation_is_caught(path):
    checked = small(check_file(path))
    killed, total, survivors = mutation_report(checked, sizes_of(checked))
    assert survivors == []
    assert killed == total > 0
