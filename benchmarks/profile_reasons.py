"""Measured reasons behind docs/benchmarks.md: where a chain's time goes, on the lent H200.

Two modes, each over ``CHAIN:WIDTH`` arguments (catalogue builds re-sized with coda bench's width
rule, M = 16384, inputs drawn as coda bench draws them):

* ``ncu``: each coda kernel of the chain, then the cuBLAS GEMM on the same operands, inside an
  NVTX range ``coda`` so that Nsight Compute profiles just those launches:
      ncu --nvtx --nvtx-include "coda/" --section SpeedOfLight ... \\
          python3 benchmarks/profile_reasons.py ncu b2_dgrad_dswiglu:4096
* ``prof``: one whole chain call under torch.profiler, the CUDA kernels it launched with their
  count and total time (host steps and finalizes run as many small torch kernels today):
      python3 benchmarks/profile_reasons.py prof b4_ce_fwd_bwd:4096 llama_block:4096

Run through ``bash benchmarks/device_run.sh reasons`` on the device. ``CODA_BUILD_ROOT`` (default
``build``) picks the build root; in ``ncu`` mode ``CODA_VARIANTS`` (config texts separated by
``;``, or ``all``) profiles those variants of each kernel of a multi-variant build, each forced in
turn (default: the variant a plain call selects).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from coda_spec.bench.driver import Options, _operands, at_dims, draw, shapes
from coda_spec.runtime import load


def prepared(target: str):
    name, width = target.split(":")
    chain = load(Path(os.environ.get("CODA_BUILD_ROOT", "build")) / f"{name}-latest")
    checked = chain.checked()
    (sizes,) = shapes(checked.spec, Options(ms=(16384,), widths=(int(width),)))
    chain, checked = at_dims(chain, checked, sizes)
    _, inputs, grads = draw(chain, checked, sizes, Options())
    env = chain.run(dict(inputs), grads=grads)
    torch.cuda.synchronize()
    return chain, sizes, inputs, grads, env


def ncu(targets):
    for t in targets:
        chain, sizes, _, _, env = prepared(t)
        m = chain.manifest
        steps = m.kernel_steps()
        want = os.environ.get("CODA_VARIANTS", "")
        for s in steps:
            names = chain.variant_names(s.name)
            picks = (
                [None]
                if not want
                else [i for i, n in enumerate(names) if want == "all" or n in want.split(";")]
            )
            for i in picks:
                run = chain if i is None else chain.with_variants({s.name: i})
                fn = run.steps_fn(env, sizes, [s])
                a, b = _operands(m, s, env)
                fn(), torch.mm(a, b)  # warm: module load, cuBLAS heuristics
                torch.cuda.synchronize()
                label = "" if i is None else f" [{names[i]}]"
                print(
                    f"{t} {s['name']}{label}: coda kernel, then torch.mm {tuple(a.shape)} @ "
                    f"{tuple(b.shape)}",
                    flush=True,
                )
                torch.cuda.nvtx.range_push("coda")
                fn()
                torch.mm(a, b)
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()


def prof(targets):
    from torch.profiler import ProfilerActivity, profile

    for t in targets:
        chain, sizes, inputs, grads, _ = prepared(t)
        chain.run(dict(inputs), grads=dict(grads) if grads else None)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
            chain.run(dict(inputs), grads=dict(grads) if grads else None)
            torch.cuda.synchronize()
        events = [e for e in p.key_averages() if e.device_type.name == "CUDA"]
        total = sum(e.device_time_total for e in events) / 1e3
        n = sum(e.count for e in events)
        print(
            f"\n== {t}: one call ({'forward+backward' if grads else 'forward'}): {n} CUDA "
            f"kernel launches, {total:.2f} ms of kernel time"
        )
        print(
            p.key_averages().table(
                sort_by="device_time_total", row_limit=25, max_name_column_width=70
            )
        )


if __name__ == "__main__":
    {"ncu": ncu, "prof": prof}[sys.argv[1]](sys.argv[2:])
