"""``coda verify --sanitize``: the small case again, in a child process under NVIDIA's
compute-sanitizer (memcheck), with its verdict for the report.

A separate process because memcheck instruments a whole CUDA context; the child is plain
``coda verify --small``, so what it runs is exactly the protocol in ``coda_spec.verify``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys


def sanitize(directory, seed: int) -> dict:
    """Run the small case under compute-sanitizer memcheck in a child process.

    Returns ``{"result": "clean" | "unclean" | "unavailable", "errors": N, "detail": ...}``.
    memcheck instruments the SM's loads and stores; TMA bulk copies are issued by the copy
    engine and may escape it, so "clean" is not a proof for TMA traffic.
    """
    tool = shutil.which("compute-sanitizer") or next(
        (
            p
            for p in (
                "/usr/local/cuda/bin/compute-sanitizer",
                "/usr/local/cuda/compute-sanitizer/compute-sanitizer",
            )
            if os.path.exists(p)
        ),
        None,
    )
    if tool is None:
        return {"result": "unavailable", "errors": None, "detail": "compute-sanitizer not found"}
    cmd = [
        tool,
        "--tool",
        "memcheck",
        "--print-limit",
        "20",
        sys.executable,
        "-m",
        "coda_spec.cli",
        "verify",
        str(directory),
        "--small",
        "--seed",
        str(seed),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    text = res.stdout + res.stderr
    m = re.search(r"ERROR SUMMARY: (\d+) error", text)
    if m is None:
        return {
            "result": "unavailable",
            "errors": None,
            "detail": f"no ERROR SUMMARY (exit {res.returncode}): {text.strip()[-300:]}",
        }
    n = int(m.group(1))
    return {
        "result": "clean" if n == 0 else "unclean",
        "errors": n,
        "detail": "" if n == 0 else text.strip()[-2000:],
    }
