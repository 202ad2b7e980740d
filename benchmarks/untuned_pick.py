"""Which single config to give a kernel nobody tuned, re-learnt from tune files (no GPU).

    python benchmarks/untuned_pick.py TUNE.json [TUNE.json ...] [--within 0.05] [--markdown]

Reads ``coda tune`` files (the format of ``coda_spec/tuned/h200.json``) and, over every kernel x
shape point whose entry timed more than one candidate, ranks each candidate config by how far it
is from that point's fastest: the points where it is within ``--within`` of the fastest, its
geometric-mean distance from the fastest and its worst distance. A point where a candidate did
not run (``null``) counts against it as a miss and is left out of its mean. Only candidates timed
at every point are ranked first; the others follow, marked with their coverage.

This is the data behind ``coda_spec.config.DEFAULT`` (docs/tuning.md, "The untuned pick").
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Rank:
    config: str
    points: int  # points it ran at
    within: int  # points within the threshold of the fastest
    geomean: float  # geometric mean of ms / fastest ms, minus 1
    worst: float  # worst ms / fastest ms, minus 1
    worst_at: str


def points(tables: list[dict]) -> list[tuple[str, dict]]:
    """(label, {config: ms or None}) for every entry that timed more than one candidate."""
    out = []
    for t in tables:
        for key, build in t["builds"].items():
            for step, entries in build["kernels"].items():
                for e in entries:
                    cands = e.get("candidates") or {}
                    if sum(v is not None for v in cands.values()) > 1:
                        dims = ",".join(f"{k}={v}" for k, v in sorted(e["dims"].items()))
                        label = f"{key.rsplit('-', 1)[0]}/{step} [{dims}] M<={e['m_max']}"
                        out.append((label, cands))
    return out


def rank(pts: list[tuple[str, dict]], within: float) -> list[Rank]:
    configs = sorted({c for _, cands in pts for c in cands})
    ranks = []
    for c in configs:
        offs = []
        for label, cands in pts:
            ms = cands.get(c)
            if ms is None:
                continue
            best = min(v for v in cands.values() if v is not None)
            offs.append((ms / best - 1.0, label))
        if not offs:
            continue
        worst, at = max(offs)
        ranks.append(
            Rank(
                config=c,
                points=len(offs),
                within=sum(o <= within for o, _ in offs),
                geomean=math.exp(sum(math.log1p(o) for o, _ in offs) / len(offs)) - 1.0,
                worst=worst,
                worst_at=at,
            )
        )
    n = len(pts)
    return sorted(ranks, key=lambda r: (r.points < n, -r.within, r.geomean))


def table(ranks: list[Rank], n: int, within: float) -> str:
    head = (
        f"| candidate | within {within:.0%} of the fastest (of {n}) | geometric mean off the "
        "fastest | worst (at) |\n| --- | --- | --- | --- |"
    )
    rows = [
        f"| {r.config} | {r.within}"
        + (f" (ran at {r.points})" if r.points < n else "")
        + f" | {r.geomean:.1%} | {r.worst:.1%} ({r.worst_at}) |"
        for r in ranks
    ]
    return "\n".join([head, *rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tables", nargs="+", help="coda tune files (JSON)")
    ap.add_argument("--within", type=float, default=0.05, help="threshold (default 0.05)")
    args = ap.parse_args(argv)
    tables = []
    for p in args.tables:
        with open(p) as f:
            tables.append(json.load(f))
    pts = points(tables)
    if not pts:
        print("no kernel x shape point timed more than one candidate")
        return 1
    print(table(rank(pts, args.within), len(pts), args.within))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
