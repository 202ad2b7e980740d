"""How long torch.compile takes on a Llama's first step, by depth (issue 33, item 2).

    python3 benchmarks/compile_depth.py --layers 2,4,8 --mode coda-compile --out /tmp/cd \
        [--shape 1b-2x4096] [--cprofile 4] [--timeout 120]

Each depth runs in its own process (a fresh compile cache: ``TORCHINDUCTOR_CACHE_DIR`` in a new
temporary directory, so no depth reuses another's kernels): the model of
``benchmarks/train_step.py``'s ``--mode`` at that many layers, its first step (forward, loss,
backward; compile included) timed, then a second step. Per depth it writes to ``--out``:

* ``depth-<L>.json``: first and second step s, graph breaks and graphs compiled (dynamo's
  counters), and torch._dynamo's ``compile_times()`` table;
* ``stacks-<L>.txt``: every thread's Python stack if it crashes or times out (``faulthandler``;
  the parent sends SIGUSR1 at the time-out, then kills it), so it still shows where it was;
* with ``--cprofile L``: ``cprofile-<L>.txt``, that depth's 40 costliest functions by own time
  and by cumulative time.

``summary.json`` holds every depth's row (an error row for a depth that failed or timed out).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/: train_step
import train_step as T  # noqa: E402


def child(args) -> dict:
    import cProfile
    import faulthandler
    import io
    import pstats

    import torch

    T.need_gpu("compile_depth")
    out = Path(args.out)
    stacks = open(out / f"stacks-{args.layers}.txt", "w")  # noqa: SIM115 (held to the end)
    # a crash, or the parent's SIGUSR1 at the time-out, writes every thread's stack (a timed
    # dump_traceback_later reads other threads' frames unlocked: it crashed children here)
    faulthandler.enable(file=stacks, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    ns = argparse.Namespace(
        mode=args.mode,
        shape=args.shape,
        layers=args.layers,
        builds=args.builds,
        tuned=None,
        tuned_old=None,
        kind="fwdbwd",
    )
    _, _, _, one_step, _, _, _ = T.setup(ns)
    prof = cProfile.Profile() if args.cprofile == args.layers else None
    t0 = time.perf_counter()
    if prof is not None:
        prof.enable()
    one_step()
    torch.cuda.synchronize()
    if prof is not None:
        prof.disable()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    one_step()
    torch.cuda.synchronize()
    second = time.perf_counter() - t0
    if prof is not None:
        text = io.StringIO()
        for key in ("tottime", "cumulative"):
            pstats.Stats(prof, stream=text).sort_stats(key).print_stats(40)
        (out / f"cprofile-{args.layers}.txt").write_text(text.getvalue())
    counters = torch._dynamo.utils.counters
    return {
        "layers": args.layers,
        "mode": args.mode,
        "first_step_s": round(first, 2),
        "second_step_s": round(second, 3),
        "graph_breaks": sum(counters["graph_break"].values()),
        "graphs": counters["stats"].get("unique_graphs", 0),
        "compile_times": torch._dynamo.utils.compile_times(repr="str"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", default="2,4,8", help="comma-separated depths")
    ap.add_argument("--mode", default="coda-compile", choices=T.MODES)
    ap.add_argument("--shape", default="1b-2x4096", choices=sorted(T.SHAPES))
    ap.add_argument("--builds", default="build")
    ap.add_argument("--cprofile", type=int, default=None, help="profile this depth")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per depth")
    ap.add_argument("--out", required=True)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.child is not None:
        args.layers = args.child
        print(json.dumps(child(args)))
        return 0
    depths = [int(x) for x in args.layers.split(",") if x.strip()]
    rows, failed = [], []
    for depth in depths:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="coda-ind-")}
        cmd = [sys.executable, __file__, *sys.argv[1:], "--child", str(depth)]
        print(f"[compile_depth] {args.mode} at {depth} layers ...", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            stdout, stderr = proc.communicate(timeout=args.timeout)
            lines = stdout.decode().strip().splitlines()
            if proc.returncode == 0 and lines:
                row = json.loads(lines[-1])
            else:
                tail = stderr.decode().strip()[-2000:]
                row = {"layers": depth, "error": f"exit {proc.returncode}: {tail or 'no output'}"}
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # its stacks, then the kill
            time.sleep(3)
            proc.kill()
            proc.communicate()
            row = {"layers": depth, "error": f"timed out after {args.timeout} s"}
        row["wall_s"] = round(time.monotonic() - t0, 1)
        rows.append(row)
        say = row.get("error", "").splitlines()[-1:] or [f"first step {row['first_step_s']} s"]
        print(f"  {say[0]} ({row['wall_s']} s)", file=sys.stderr, flush=True)
        if "error" in row:
            failed.append(depth)
        Path(args.out, f"depth-{depth}.json").write_text(json.dumps(row, indent=1))
        Path(args.out, "summary.json").write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
