"""Measure `coda build` per bundled spec: wall time (fresh, no cache), kernels, artifact sizes.

    python benchmarks/build_times.py [--out /tmp/coda-build-times] [--jobs 2] > table.md

Each spec is built from scratch (a fresh output directory) with the default config, one spec at a
time, so the wall time includes the compile workers' ~5 s of imports. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/coda-build-times")
    ap.add_argument("--jobs", default="2")
    args = ap.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    rows = []
    for spec in sorted((ROOT / "specs").glob("*.yaml")):
        start = time.perf_counter()
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "coda_spec.cli",
                "build",
                str(spec),
                "-o",
                str(out),
                "-j",
                args.jobs,
                "--print-dir",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        wall = time.perf_counter() - start
        if res.returncode != 0:
            rows.append((spec.stem, "FAILED", "", "", "", res.stderr.strip().splitlines()[-1]))
            continue
        d = Path(res.stdout.strip().splitlines()[-1])
        m = json.loads((d / "manifest.json").read_text())
        ks = [s for s in m["steps"] + m["backward_steps"] if s["kind"] == "kernel"]
        so = (d / m["library"]).stat().st_size if m["library"] else 0
        objs = sum(k["object_bytes"] for k in ks)
        comp = sum(k["compile_s"] for k in ks)
        rows.append(
            (
                spec.stem,
                f"{wall:.1f}",
                str(len(ks)),
                f"{comp:.1f}",
                f"{objs // 1024}",
                f"{so // 1024}",
            )
        )
    print(
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}), no GPU, `-j {args.jobs}`, "
        "default config (128x256 cooperative, cluster 2x1), fresh output directory per spec.\n"
    )
    print("| spec | wall s | kernels | sum of compile s | objects KiB | .so KiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    failed = [r[0] for r in rows if r[1] == "FAILED"]
    if failed:  # the table above keeps them; the run fails (benchmarks' rule)
        print(f"build_times: {len(failed)} build(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
