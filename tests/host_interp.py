"""Run one generated host kernel under Triton's CPU interpreter, next to the reference.

A helper of ``tests/test_host_kernel.py``, run in a subprocess (Triton reads TRITON_INTERPRET
when ``@triton.jit`` decorates, and the build tests of the same pytest session need the real
compiler):

    TRITON_INTERPRET=1 python -m tests.host_interp CASE.json OUT.pt

CASE.json may also hold a list of cases, each with an ``"id"``: they run in one process (one
interpreter start), and OUT.pt maps each id to its result, or to ``{"error": traceback}``.

CASE: ``{"spec", "step", "dims" (static dim overrides), "rows" (M), "block" (slots per chunk or
null), "seed", "force" ({tensor: {row: value}}: index values a test needs, e.g. -100 rows)}``.

Inputs are drawn as ``coda verify`` draws them; the whole chain runs in the reference
interpreter (fp32, with random incoming gradients for a backward step) to give every tensor the
step reads. The step then runs twice on those tensors, rounded to their declared dtypes: as the
generated kernel (grid (M,), outputs pre-filled with NaN so unwritten elements show) and as the
reference (``coda_spec.prove.reference``, fp32), with the finalizes the kernel folds. OUT.pt holds
``{"kernel": {...}, "reference": {...}, "dtypes": {...}}`` for every tensor the kernel writes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def _case_inputs(checked, case, sizes):
    import torch

    from coda_spec.prove.inputs import make_inputs
    from coda_spec.prove.reference import TORCH_DTYPES

    low, _ = make_inputs(checked.spec, sizes, seed=case.get("seed", 0))
    for name, rows in case.get("force", {}).items():
        for row, value in rows.items():
            low[name][int(row)] = value
    grads = None
    backward = dict(checked.spec.sections()).get("backward", ())
    if any(s.kind == "host" and s.name == case["step"] for s in backward):
        gen = torch.Generator().manual_seed(case.get("seed", 0) + 1)
        grads = {}
        for t in checked.analysis.tensors:
            if t.origin == "grad_in":
                shape = tuple(sizes[d] if isinstance(d, str) else d for d in t.shape)
                x = torch.randn(shape, generator=gen, dtype=torch.float64)
                grads[t.name] = x.to(TORCH_DTYPES[t.dtype])
    return low, grads


def _round_like_the_gpu() -> None:
    """Triton 3.9's interpreter converts fp32 -> bf16 by truncation (its RTNE path mishandles
    the mantissa carry); compiled kernels round to nearest even (``cvt.rn.bf16.f32``), as
    torch does. Make the interpreter convert as the GPU does, so bf16 outputs compare exactly."""
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter

    plain = interpreter.InterpreterBuilder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            x = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))
            data = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            return interpreter.TensorHandle(data, tl.bfloat16)
        return plain(self, src, dst_type)

    interpreter.InterpreterBuilder.cast_impl = cast_impl


def main(argv) -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("run with TRITON_INTERPRET=1", file=sys.stderr)
        return 2
    import torch

    cases = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1])
    if isinstance(cases, dict):  # one case
        torch.save(_one(cases, out.with_suffix(".py")), out)
        return 0
    # a batch, {"id": ..., **case} each: one interpreter start for all; a case that raises is
    # recorded as its error, so the others still run
    results = {}
    for case in cases:
        try:
            results[case["id"]] = _one(case, out.with_name(f"{case['id']}.py"))
        except Exception:  # noqa: BLE001 - reported to the case's test, which fails on it
            import traceback

            results[case["id"]] = {"error": traceback.format_exc()}
    torch.save(results, out)
    return 0


def _one(case: dict, source: Path) -> dict:
    """Run one case; ``source`` is where the generated kernel's text is written and imported."""
    import torch

    from coda_spec.artifact import Arg, eval_shape
    from coda_spec.check.frontend import check_file, with_dims
    from coda_spec.finalize import partial_fold
    from coda_spec.lower.host_kernel import host_kernel
    from coda_spec.lower.triton_aot import _import_source
    from coda_spec.prove.reference import PRECISIONS, TORCH_DTYPES, _run_step, run
    from coda_spec.runtime.launch import launch_grid, launch_values

    checked = check_file(case["spec"])
    if case.get("dims"):
        checked = with_dims(checked, case["dims"])
    spec, analysis = checked.spec, checked.analysis
    sizes = {d.name: (d.size if d.size is not None else case["rows"]) for d in spec.dims}
    kernel = host_kernel(checked, case["step"], block=case.get("block"))

    low, grads = _case_inputs(checked, case, sizes)
    env = run(analysis, low, "fp32", sizes, grads=grads)
    section = list(spec.all_steps())
    step = next(s for s in section if s.kind == "host" and s.name == case["step"])
    written = {o["tensor"] for o in kernel.outputs}
    reads = {}
    for arg in kernel.args:
        name = arg.get("tensor")
        if name is not None and name not in written:  # as the kernel reads it: declared dtype
            reads[name] = env[name].to(TORCH_DTYPES[analysis.tensor(name).dtype]).contiguous()

    ref = {k: (v.float() if v.is_floating_point() else v) for k, v in reads.items()}
    prec = (PRECISIONS["fp32"], sizes, analysis)
    _run_step(prec, step, ref)
    for s in section:
        if s.kind == "finalize" and s.name in kernel.folds:
            _run_step(prec, s, ref)

    source.write_text(kernel.source)
    _round_like_the_gpu()
    fn = _import_source(source, kernel.entry)
    outs = {}
    for o in kernel.outputs:
        if o.get("over"):  # a store over a tile the kernel reads: that buffer, as the runtime does
            outs[o["tensor"]] = reads[o["over"]]
            continue
        dtype = TORCH_DTYPES[o["dtype"]]
        outs[o["tensor"]] = torch.full(eval_shape(o["shape"], sizes), float("nan"), dtype=dtype)
    bound = {**reads, **outs}
    # bound as the runtime binds a launch
    args = launch_values(tuple(Arg.from_data(a) for a in kernel.args), bound, sizes)
    fn[launch_grid(tuple(kernel.grid), bound, sizes)](*args, **dict(kernel.constexprs))

    for t, v in outs.items():  # a reduce_col partial is (rows, W) per-row terms: fold them
        part = analysis.tensor(t).partial
        if part is not None and part.kind == "colpart":
            outs[t] = v.amax(0) if partial_fold(part.reduce) == "max" else v.sum(0)
    result = {
        "kernel": outs,
        "reference": {t: ref[t].reshape(outs[t].shape) for t in outs},
        "dtypes": {o["tensor"]: o["dtype"] for o in kernel.outputs},
        "folds": list(kernel.folds),
        "reads": {k: v for k, v in reads.items()},
    }
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
