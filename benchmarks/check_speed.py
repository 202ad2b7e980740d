"""Wall-clock time of ``coda check specs`` as a user runs it (a fresh process each time).

    python benchmarks/check_speed.py [--runs 7] [PATH ...]

Runs ``python -m coda_spec.cli check -q PATHS`` (default: the bundled ``specs/``) several times
and prints each run and the median, in seconds. Process start-up and imports are included on
purpose: that is what a user waits for. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("paths", nargs="*", default=[str(ROOT / "specs")])
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "coda_spec.cli", "check", "-q", *args.paths]
    subprocess.run(cmd, cwd=ROOT, capture_output=True)  # warm the OS file and bytecode caches
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 2):
            print(proc.stdout + proc.stderr, file=sys.stderr)
            return 1
    n_specs = sum(
        1 for p in map(Path, args.paths) for _ in (p.rglob("*.y*ml") if p.is_dir() else [p])
    )
    print("runs (s): " + " ".join(f"{t:.3f}" for t in times))
    print(
        f"coda check {' '.join(args.paths)} ({n_specs} files, exit {proc.returncode}): "
        f"median {statistics.median(times):.3f} s over {args.runs} runs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
