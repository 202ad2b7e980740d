"""The runtime's own Python per call, without a GPU: a build's ``Chain.run`` with every launch
replaced by a no-op, so what is timed is validation, planning, views, allocation and argument
binding -- the part a refactor of the runtime can change -- free of the GPU machine's noise.

    python benchmarks/host_overhead_cpu.py [ROOT]     # ROOT: a checkout to import coda_spec from

Builds are the CPU tests' (``tests.test_runtime_cpu.make_build``: a shrunk spec and the manifest
``coda build`` would write, no library), with operand majors set as a real build records them.
Run it once per checkout to compare two runtimes on one machine (docs/benchmarks.md).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from coda_spec import runtime  # noqa: E402
from tests.test_runtime_cpu import _inputs, make_build  # noqa: E402

CHAINS = ("f2_deferred_norm", "rmsnorm_chain", "llama_block")


def _no_launches() -> None:
    """Every launch a no-op on the CPU, for the runtime this checkout has (a package since issue
    18, one module before)."""
    if hasattr(runtime, "checks"):
        from coda_spec.runtime import checks, cubin, launch

        checks.current_device = lambda: torch.device("cpu")
        launch.Launcher.function = lambda self, symbol: lambda *a: None
        launch.Launcher.sm_count = lambda self, dev: 132
        cubin.Cubin.launch = lambda self, *a: None
    else:
        from coda_spec import launch as old_launch

        runtime._current_device = lambda: torch.device("cpu")
        runtime.Chain._fn = lambda self, symbol: lambda *a: None
        runtime.Chain._sm_count = lambda self, dev: 132
        old_launch.Cubin.launch = lambda self, *a: None


def _real_majors(m: dict) -> None:
    for s in m["steps"] + m["backward_steps"]:
        if s["kind"] == "kernel":
            majors = {"A": "col" if s["a"][1] else "row", "B": "row" if s["b"][1] else "col"}
            s["majors"] = majors
            for v in s["variants"]:
                v["majors"] = majors


def main() -> int:
    _no_launches()
    tmp = Path(tempfile.mkdtemp())
    print(f"runtime from {ROOT}; median of 400 calls at M = 256 (launches are no-ops)")
    for name in CHAINS:
        (tmp / name).mkdir()
        d, checked = make_build(tmp / name, name, _real_majors)
        chain = runtime.load(d, tuned=False)
        _, low = _inputs(checked, 256)
        for check in (True, False):
            for _ in range(50):
                chain.run(dict(low), check=check)
            us = []
            for _ in range(400):
                t0 = time.perf_counter()
                chain.run(dict(low), check=check)
                us.append((time.perf_counter() - t0) * 1e6)
            what = "checked" if check else "unchecked"
            print(f"{name:18} {what:9} {statistics.median(us):7.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
