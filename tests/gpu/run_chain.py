"""Run a built chain on the GPU and compare every output with the reference interpreter.

    python3 tests/gpu/run_chain.py BUILD_DIR [--m 16384 --m 1000] [--seed 0] [--json OUT]

For each M: fresh random inputs (``coda_spec.prove.inputs``, never zeros, recorded seed), the
kernels
through ``coda_spec.runtime``, the spec's math in fp64 (ref) and in the low-precision pipeline
(ref_lowp) with ``coda_spec.prove.reference`` on the same GPU, and per output: max |out - ref|, the
relative error ||out - ref|| / ||ref||, and verify's pass rule (``coda_spec.verify.run.bound``, the
one home of the rule; docs/verification.md).
This is issue 3's end-to-end check; ``coda verify`` will grow from it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

import coda_spec
from coda_spec.prove.inputs import make_inputs
from coda_spec.prove.reference import run
from coda_spec.verify.run import bound


def compare(chain, m: int, seed: int) -> list[dict]:
    checked = chain.checked()
    sizes = {d.name: (d.size if d.size is not None else m) for d in checked.spec.dims}
    low, _ = make_inputs(checked.spec, sizes, seed)
    dev = torch.device("cuda")
    inputs = {k: v.to(dev) for k, v in low.items()}
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = chain(**{k: v.clone() for k, v in inputs.items()})
    torch.cuda.synchronize()
    first_call_s = time.perf_counter() - t0
    ref = run(checked.analysis, inputs, "fp64", sizes)
    lowp = run(checked.analysis, inputs, "lowp", sizes)
    rows = []
    for o in chain.manifest.outputs:
        name = o.name
        got, want, lo = out[name].double(), ref[name].double(), lowp[name].double()
        err = (got - want).abs()
        limit = bound(want, lo, o.dtype)
        rows.append(
            {
                "M": m,
                "output": name,
                "shape": list(got.shape),
                "dtype": o.dtype,
                "max_abs_err": float(err.max()),
                "rel_err": float(err.norm() / want.norm()),
                "bound": limit,
                "nan": int(torch.isnan(got).sum()),
                "pass": bool(torch.isfinite(got).all()) and float(err.max()) <= limit,
                "first_call_s": round(first_call_s, 4),
            }
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--m", type=int, action="append")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    chain = coda_spec.load(args.build_dir)
    print(f"chain {chain.name} from {chain.directory}; GPU {torch.cuda.get_device_name()}")
    rows = []
    for m in args.m or [16384, 1000]:
        rows += compare(chain, m, args.seed)
    print(
        f"{'M':>6} {'output':<14} {'shape':<16} {'max_abs_err':>12} {'rel_err':>10} "
        f"{'bound':>10} pass"
    )
    for r in rows:
        print(
            f"{r['M']:>6} {r['output']:<14} {str(r['shape']):<16} {r['max_abs_err']:>12.3e} "
            f"{r['rel_err']:>10.3e} {r['bound']:>10.3e} {'yes' if r['pass'] else 'NO'}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["pass"] for r in rows) else 3


if __name__ == "__main__":
    sys.exit(main())
