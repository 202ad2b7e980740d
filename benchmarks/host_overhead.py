"""Host time per call of built chains (issues 10, 18, 19): coda's own Python between launches.

Run on the GPU machine (carry .device and the builds):

    source .device/setup.sh && python3 benchmarks/host_overhead.py build/f2_deferred_norm-latest \
        build/rmsnorm_chain-latest build/llama_block-latest --m 256 --calls 400

What it measures: the CPU time of one ``chain.run`` (perf_counter around the call; launches are
asynchronous, so this is the time the call keeps the Python thread busy), at a small M so the
GPU keeps up, with a ``torch.cuda.synchronize`` every 8 calls outside the timed region (the
launch queue never fills). Reported: median and p90 per call, with checks on and off, the
launches per call (GEMM kernels, host kernels, finalize kernels), and the median per launch. For
comparison: a CUDA-graph replay of the same call (its CPU time), and torch's own cost of
launching a kernel (``torch.add`` on a small tensor). Forward rows also time the chain's torch
op (``coda_spec.op``): its eager call and a call through the dispatcher.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import coda_spec  # noqa: E402
from coda_spec import load  # noqa: E402
from coda_spec.bench.driver import Options, draw  # noqa: E402


def _inputs(chain, m: int, seed: int = 0):
    """(sizes, inputs, grads) on the GPU, drawn as coda bench draws them."""
    checked = chain.checked()
    sizes = {d.name: (d.size or m) for d in checked.spec.dims}
    _, inputs, grads = draw(chain, checked, sizes, Options(seed=seed))
    return sizes, inputs, grads


def _launches(chain, sizes: dict, backward: bool) -> int:
    n = 0
    for _step, what in chain.plan(sizes, backward=backward):
        if what == "launch" or what in ("host", "finalize"):
            n += 1
    return n


def _time_calls(fn, calls: int) -> list[float]:
    out = []
    for i in range(calls):
        if i % 8 == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return out


def _stats(us: list[float]) -> dict:
    us = sorted(us)
    return {
        "median_us": round(statistics.median(us), 1),
        "p90_us": round(us[int(0.9 * (len(us) - 1))], 1),
    }


def measure(build: Path, m: int, calls: int) -> list[dict]:
    chain = load(build, tuned=False)
    sizes, inputs, grads = _inputs(chain, m)
    rows = []
    cases = [("fwd", None)] + ([("fwd+bwd", grads)] if grads else [])
    for direction, g in cases:
        launches = _launches(chain, sizes, g is not None)
        row = {"chain": chain.name, "direction": direction, "m": m, "launches": launches}
        for check in (True, False):

            def call(check=check, g=g):
                # add_to outputs accumulate into the incoming gradients: harmless for timing
                chain.run(inputs, grads=g, check=check)

            for _ in range(20):
                call()
            s = _stats(_time_calls(call, calls))
            key = "checked" if check else "unchecked"
            row[key] = s
            row[f"{key}_per_launch_us"] = round(s["median_us"] / launches, 1)
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            chain.run(inputs, grads=g)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            chain.run(inputs, grads=g)
        row["graph_replay"] = _stats(_time_calls(graph.replay, calls))
        if g is None:  # the torch op of the chain: its eager bypass, and through the dispatcher
            row.update(_op_rows(coda_spec.op(chain), inputs, calls, launches))
        rows.append(row)
    return rows


def breakdown(build: Path, m: int, calls: int) -> dict:
    """Where a checked forward call's host time goes: validation alone, and each step alone
    (its allocations, argument binding and launch; ``Chain.steps_fn``, no validation)."""
    chain = load(build, tuned=False)
    sizes, inputs, _ = _inputs(chain, m)
    env = chain.run(inputs)
    parts = {"validate": _stats(_time_calls(lambda: chain.bind(inputs), calls))["median_us"]}
    for step in chain.manifest.steps:
        fn = chain.steps_fn(env, sizes, [step])
        for _ in range(10):
            fn()
        parts[f"{step.kind} {step.name}"] = _stats(_time_calls(fn, calls))["median_us"]
    parts.update(_launch_calls(chain, inputs, calls))
    return {"chain": chain.name, "us": parts}


def _launch_calls(chain, inputs: dict, calls: int) -> dict:
    """The median time inside the launch calls themselves -- the exported GEMM function
    (TVM-FFI, its tensor arguments converted by DLPack) and the driver launch of a cubin --
    per launch, over ``calls`` checked forward calls."""
    from coda_spec.runtime import cubin as launch

    spent = {"gemm call": [], "cubin call": []}

    def timed(fn, what):
        def call(*a):
            t0 = time.perf_counter()
            out = fn(*a)
            spent[what].append((time.perf_counter() - t0) * 1e6)
            return out

        return call

    fns = chain._launcher._fns  # symbol -> exported function, filled by the warm-up calls
    fns.update({k: timed(f, "gemm call") for k, f in fns.items()})
    real = launch.Cubin.launch
    launch.Cubin.launch = timed(real, "cubin call")
    try:
        _time_calls(lambda: chain.run(inputs), calls)
    finally:
        launch.Cubin.launch = real
    return {k: round(statistics.median(v), 1) for k, v in spent.items() if v}


def _op_rows(op, inputs: dict, calls: int, launches: int) -> dict:
    """The chain's torch op (docs/training.md): ``op(**inputs)`` (the eager bypass: no
    dispatcher) and ``torch.ops.coda.<op_name>`` itself (the dispatcher, as under autograd)."""
    args = [inputs[n] for n in op.inputs]
    out = {}
    ways = (("op_eager", lambda: op(**inputs)), ("op_dispatch", lambda: op.op(*args, op.dims)))
    for key, fn in ways:
        for _ in range(20):
            fn()
        out[key] = _stats(_time_calls(fn, calls))
        out[f"{key}_per_launch_us"] = round(out[key]["median_us"] / launches, 1)
    return out


def torch_launch_us(calls: int) -> dict:
    x = torch.ones(256, device="cuda")
    for _ in range(50):
        torch.add(x, 1.0)
    return _stats(_time_calls(lambda: torch.add(x, 1.0), calls))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="+", type=Path)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    for b in args.builds:
        rows += measure(b, args.m, args.calls)
    parts = [breakdown(b, args.m, args.calls) for b in args.builds]
    ref = torch_launch_us(args.calls)
    empty = _stats(_time_calls(lambda: torch.empty(args.m, 4096, device="cuda"), args.calls))
    print(
        f"{'chain':22} {'dir':8} {'launches':>8} {'checked us':>11} {'per launch':>10} "
        f"{'unchecked us':>12} {'per launch':>10} {'graph replay us':>15}"
    )
    for r in rows:
        print(
            f"{r['chain']:22} {r['direction']:8} {r['launches']:8d} "
            f"{r['checked']['median_us']:11.1f} {r['checked_per_launch_us']:10.1f} "
            f"{r['unchecked']['median_us']:12.1f} {r['unchecked_per_launch_us']:10.1f} "
            f"{r['graph_replay']['median_us']:15.1f}"
        )
    for r in rows:
        if "op_eager" in r:
            print(
                f"{r['chain']:22} op: eager {r['op_eager']['median_us']:.1f} us "
                f"({r['op_eager_per_launch_us']} per launch), through the dispatcher "
                f"{r['op_dispatch']['median_us']:.1f} us ({r['op_dispatch_per_launch_us']})"
            )
    print(f"torch.add launch (reference): median {ref['median_us']} us, p90 {ref['p90_us']} us")
    print(f"torch.empty on the GPU (reference): median {empty['median_us']} us")
    for p in parts:
        print(f"{p['chain']}: " + ", ".join(f"{k} {v} us" for k, v in p["us"].items()))
    doc = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "m": args.m,
        "calls": args.calls,
        "rows": rows,
        "torch_add_launch": ref,
        "torch_empty": empty,
        "breakdown": parts,
    }
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
