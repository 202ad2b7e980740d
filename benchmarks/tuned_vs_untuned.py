"""Issue 9's table: the catalogue untuned (every kernel at its fallback, the default config) and
tuned (tuned/h200.json), coda ÷ SoL and coda's speedup over its best complete baseline, from
`coda bench` results files (``device_run.sh catalogue-bench``). No GPU needed:

    python benchmarks/tuned_vs_untuned.py UNTUNED.json TUNED.json [UNTUNED_REPEAT.json
        TUNED_REPEAT.json]

Prints one markdown row per chain, direction and width: untuned, tuned, and (with the repeat
files) the ÷ SoL of the repeat runs, so run-to-run noise is visible next to each change.
"""

from __future__ import annotations

import sys
from pathlib import Path

from coda_spec.bench import model as M


def cells(path: str) -> dict:
    run = M.loads(Path(path).read_text())
    out = {}
    for case in run.cases:
        coda = case.candidate("coda")
        if coda is None or coda.stats is None:
            continue
        x_sol = M.derived(case, run.device, coda.stats).get("x_sol")
        best = M.best_baseline(case)
        vs = best.stats.median_ms / coda.stats.median_ms if best is not None else None
        out[case.key] = (x_sol, vs, best.name if best is not None else "")
    return out


def fmt(cell) -> str:
    if cell is None:
        return "-"
    x_sol, vs, name = cell
    return f"{x_sol:.2f}x" + (f", {vs:.2f}x {name}" if vs is not None else "")


def main(paths: list[str]) -> None:
    untuned, tuned = cells(paths[0]), cells(paths[1])
    repeat = [cells(p) for p in paths[2:4]]
    head = "| chain | dir | D | untuned: ÷ SoL, vs best | tuned: ÷ SoL, vs best |"
    if repeat:
        head += " repeat ÷ SoL (untuned / tuned) |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for key, u in untuned.items():
        chain, dims, direction = key
        width = dict(p.split("=") for p in dims.split(","))["D"]
        row = f"| {chain} | {direction} | {width} | {fmt(u)} | {fmt(tuned.get(key))} |"
        if repeat:
            again = [r.get(key) for r in repeat]
            row += " " + " / ".join(f"{a[0]:.2f}x" if a else "-" for a in again) + " |"
        print(row)


if __name__ == "__main__":
    main(sys.argv[1:])
