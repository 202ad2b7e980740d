"""Host time per call, two runtimes: medians over interleaved runs of ``host_overhead.py``.

    python benchmarks/host_overhead_compare.py RESULTS_DIR...

Each RESULTS_DIR holds ``before<N>.json`` and ``after<N>.json`` (``benchmarks/device_run.sh
overhead`` writes them, alternating the order). Prints, per chain and direction, the median over
all runs of the checked and unchecked call (µs), and the same divided by that run's
``torch.add`` launch (the machine's speed at that minute), before and after.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    runs: dict = {"before": [], "after": []}
    for d in map(Path, argv):
        for side in runs:
            runs[side] += [json.loads(p.read_text()) for p in sorted(d.glob(f"{side}*.json"))]
    keys = [(r["chain"], r["direction"]) for r in runs["after"][0]["rows"]]
    n = {k: len(v) for k, v in runs.items()}
    print(f"runs: {n['before']} before, {n['after']} after; medians; x add = / torch.add's launch")
    print(
        f"{'chain':18} {'dir':8} {'':9} {'before us':>10} {'after us':>9} {'x add':>6} {'x add':>6}"
    )
    for chain, direction in keys:
        for what in ("checked", "unchecked"):
            cells = []
            for side in ("before", "after"):
                us, rel = [], []
                for doc in runs[side]:
                    row = next(
                        r for r in doc["rows"] if (r["chain"], r["direction"]) == (chain, direction)
                    )
                    us.append(row[what]["median_us"])
                    rel.append(row[what]["median_us"] / doc["torch_add_launch"]["median_us"])
                cells.append((statistics.median(us), statistics.median(rel)))
            (bu, br), (au, ar) = cells
            print(f"{chain:18} {direction:8} {what:9} {bu:10.1f} {au:9.1f} {br:6.1f} {ar:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
