"""What is live at a training step's peak allocation, by the code that allocated it.

    python3 benchmarks/memory_peak.py --shape 8b-layer4-2x4096 --modes coda,liger --out peak.json

Per mode (``benchmarks/train_step.py``'s modes, models and shapes; each in this process, one
after the other): two warm-up steps, then one step under torch's allocator history
(``torch.cuda.memory._record_memory_history``). The trace of that step is replayed: bytes
allocated rise on ``alloc`` and fall on ``free_completed``; at the highest point, every live
block is grouped by the innermost stack frame in coda_spec/, liger_kernel/, transformers/ or
benchmarks/ (else the innermost frame), and the groups are listed largest first with their MiB
and block counts. Blocks allocated before the step (weights, what the warm-up left) are not in
the trace: they are ``before_step_gib``, and the peak is that plus the trace's highest point.

Why: the coda step's peak at the 8B-like shape was 3.1 GiB above what its forward leaves
(docs/training.md); this names the code that held each block at that point.
Output: the JSON (``--out``) and a table on stdout. No GPU: exit 1 with a message.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step as T  # noqa: E402

OURS = ("coda_spec/", "liger_kernel/", "transformers/", "benchmarks/")


# coda's allocating layers: a block is placed at the frame that called into them (the first
# H200 run placed 6.9 GiB at runtime/call.py's alloc, every chain's outputs at once)
THROUGH = ("coda_spec/runtime/", "coda_spec/ops.py")


def where(frames: list) -> str:
    """The innermost frame in one of ``OURS`` and not in ``THROUGH``, else the innermost frame,
    as ``file:line fn``."""
    for f in frames:
        name = f.get("filename", "")
        if any(o in name for o in OURS) and not any(t in name for t in THROUGH):
            short = name[max(name.find(o) for o in OURS if o in name) :]
            return f"{short}:{f.get('line')} {f.get('name')}"
    if frames:
        f = frames[0]
        return f"{f.get('filename', '?')}:{f.get('line')} {f.get('name')}"
    return "?"


def peak_groups(trace: list) -> tuple[int, list]:
    """(the trace's highest allocated bytes, [(where, bytes, blocks)] live at that peak)."""
    live, cur, best, at = {}, 0, -1, {}
    for ev in trace:
        if ev["action"] == "alloc":
            live[ev["addr"]] = (ev["size"], where(ev.get("frames", [])))
            cur += ev["size"]
            if cur > best:
                best, at = cur, dict(live)
        elif ev["action"] == "free_completed" and ev["addr"] in live:
            cur -= live.pop(ev["addr"])[0]
    groups = defaultdict(lambda: [0, 0])
    for size, w in at.values():
        groups[w][0] += size
        groups[w][1] += 1
    rows = sorted(((w, b, n) for w, (b, n) in groups.items()), key=lambda r: -r[1])
    return best, rows


def one(mode: str, args) -> dict:
    import torch

    base_mode, table = T.split_mode(mode)
    tuned = T.tuned_arg(table, args.tuned, None) if base_mode.startswith("coda") else None
    cfg = T.config(args.shape, None)
    _, b, s = T.SHAPES[args.shape]
    model, fn = T.make(base_mode, cfg, args.builds, tuned)
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (b, s), device="cuda", generator=g)
    params = list(model.parameters())

    def step():
        fn(ids, ids).backward()
        for p in params:
            p.grad = None

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(stacks="python", max_entries=200_000)
    step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak, rows = peak_groups(snap["device_traces"][0])
    gib = 2**30
    return {
        "mode": mode,
        "shape": args.shape,
        "before_step_gib": round(base / gib, 3),
        "peak_gib": round((base + peak) / gib, 3),
        "max_allocated_gib": round(torch.cuda.max_memory_allocated() / gib, 3),
        "live_at_peak": [
            {"where": w, "mib": round(n / 2**20, 1), "blocks": k} for w, n, k in rows[: args.top]
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="8b-layer4-2x4096", choices=sorted(T.SHAPES))
    ap.add_argument("--modes", default="coda,liger")
    ap.add_argument("--builds", default="build")
    ap.add_argument("--tuned", default=None)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("memory_peak: no CUDA GPU here (torch.cuda.is_available() is False)")
    doc = []
    for mode in args.modes.split(","):
        res = one(mode, args)
        torch.cuda.empty_cache()  # the mode's model is gone with one()'s frame
        doc.append(res)
        Path(args.out).write_text(json.dumps(doc, indent=1))
        print(
            f"## {mode} {args.shape}: peak {res['peak_gib']} GiB (before the step "
            f"{res['before_step_gib']}; max_allocated {res['max_allocated_gib']})"
        )
        for r in res["live_at_peak"]:
            print(f"  {r['mib']:>9.1f} MiB  {r['blocks']:>4}  {r['where']}")


if __name__ == "__main__":
    main()
