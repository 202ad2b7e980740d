"""Helpers for the reference-algebra tests (also runnable: python tests/algebra.py SPEC...).

``small``/``sizes_of`` live in ``coda_spec.prove.mathcheck`` (``coda check --math`` uses them):
static
dims shrink (d -> max(d // 16, min(d, 64))) so fp64 CPU runs are fast, and the shape rules are
re-checked at the small sizes. ``mutation_report`` applies every sibling
mutant and every perturbation and lists the survivors (there must be none).
"""

from __future__ import annotations

import sys

from coda_spec.check.analyze import analyze
from coda_spec.check.frontend import Checked, check_file
from coda_spec.errors import SpecError
from coda_spec.prove.equivalence import (
    check_backward,
    check_equivalence,
    draw,
    mutants,
    perturbation_sites,
)
from coda_spec.prove.mathcheck import sizes_of, small

__all__ = ["all_checks", "mutation_report", "sizes_of", "small"]


def all_checks(checked: Checked, sizes: dict, perturb=None, drawn=None) -> list:
    out = []
    drawn = drawn or draw(checked, sizes)
    if checked.spec.equivalent_to:
        out += check_equivalence(checked, sizes, perturb=perturb, drawn=drawn)
    if checked.spec.backward is not None:
        out += check_backward(checked, sizes, perturb=perturb, drawn=drawn)
    return out


def mutation_report(checked: Checked, sizes: dict) -> tuple[int, int, list[str]]:
    """(killed, total, survivors) over sibling mutants and perturbations."""
    survivors, total, killed = [], 0, 0
    drawn = draw(checked, sizes)  # mutants never change the inputs: draw them once
    for site in perturbation_sites(checked):
        total += 1
        if all(c.ok for c in all_checks(checked, sizes, perturb=site, drawn=drawn)):
            survivors.append(f"perturbation at {site}")
        else:
            killed += 1
    for desc, spec in mutants(checked):
        total += 1
        try:
            mutant = Checked(checked.source, spec, analyze(checked.source, spec))
        except SpecError:
            killed += 1  # the checker itself rejects the mutant
            continue
        if all(c.ok for c in all_checks(mutant, sizes, drawn=drawn)):
            survivors.append(desc)
        else:
            killed += 1
    return killed, total, survivors


if __name__ == "__main__":
    for f in sys.argv[1:]:
        c = small(check_file(f))
        sz = sizes_of(c)
        for cmp in all_checks(c, sz):
            print(f"{f}: {cmp.output:<12} rel_err {cmp.rel_err:.2e} {'ok' if cmp.ok else 'FAIL'}")
        k, t, surv = mutation_report(c, sz)
        print(f"{f}: mutants killed {k}/{t}" + "".join(f"\n  SURVIVED: {s}" for s in surv))
