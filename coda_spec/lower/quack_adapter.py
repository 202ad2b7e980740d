"""The QuACK/CuTe-DSL adapter: GPU-blind compile of generated epilogues and export to objects.

This is the only module of coda's own code path that imports quack or cutlass (coda's QuACK ops
in ``coda_spec.lower.quack_ops`` are imported by the generated ``kernel.py`` it loads). It runs as
a worker process::

    python -m coda_spec.lower.quack_adapter BUILD_DIR SYMBOL [SYMBOL ...]

reading ``BUILD_DIR/kernel.py`` and ``BUILD_DIR/lowered.json`` and writing, per kernel,
``SYMBOL.o`` (the exported TVM-FFI function, cubin inside) and ``SYMBOL.compiled.json`` (the
plan's ``EpilogueArguments._fields`` in order, operand majors, scheduler facts, timings). On a
failure it writes ``SYMBOL.error.txt`` (the full traceback) and exits ``EXIT_TOOL_FAILURE``
(``coda_spec.errors``); the build reads the files, not the status, and maps the traceback back
to the spec line. One process compiles several kernels so the ~5 s of imports are paid once.

Import rule: quack, cutlass and torch are imported inside the worker's functions only (``main``
and what it calls), so the build process can import this module's host logic (``compile_jobs``)
without the ``[build]`` extra. Shapes are evaluated by the project's one evaluator
(``coda_spec.artifact.shape_fn``) and dtypes come from the one table (``coda_spec.dtypes``).

Measured recipe (docs/build.md, "Compile"): set ``QUACK_ARCH=90`` and ``CUTE_DSL_ARCH=sm_90a``
before cutlass is imported (otherwise the DSL targets sm_100a), disable QuACK's disk cache, and
patch the one GPU query (``get_max_active_clusters``; its value is a runtime argument of the
exported function anyway). Fake operands are CPU ``torch.empty`` tensors with the real dtypes,
ranks and majors; shapes are symbolic in the compiled function, so any size works at run time.

Epilogue knobs (``BuildConfig.epi_n``, ``c_stages``; docs/build.md): QuACK's sm90 GEMM derives
the epilogue subtile and the smem split between mainloop (A/B) stages and epilogue C/D stages
itself, with no argument for either. ``_epilogue_knobs`` overrides the two class-level rules
(``quack_private.SM90_TILE_SHAPE_HOOK`` and ``epi_c_stage_base``) for the duration of one
compile -- this process compiles one kernel at a time -- and reports the stage split QuACK then
chose (``stages`` in SYMBOL.compiled.json). The knobs also enter QuACK's compile key through a
``post_init_attrs`` entry, so two variants that differ only in them never share a compiled
kernel. tests/test_epilogue_knobs.py fails when QuACK renames what this relies on or changes
the split it computes for b2.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path

from coda_spec.artifact import F32_BITS, shape_fn
from coda_spec.dtypes import torch_dtype
from coda_spec.errors import EXIT_OK, EXIT_TOOL_FAILURE
from coda_spec.lower.quack_private import SM90_STAGES_HOOK, SM90_TILE_SHAPE_HOOK

REPRESENTATIVE_M = 1024  # dynamic dims only need a value to build fake tensors


def _setup():
    os.environ["QUACK_ARCH"] = "90"
    os.environ["CUTE_DSL_ARCH"] = "sm_90a"
    os.environ["QUACK_CACHE_ENABLED"] = "0"
    import quack.gemm_runtime.host as host

    host.get_max_active_clusters = lambda cluster_size, *a, **k: 132 // cluster_size


class FakeSizes(dict):
    """lowered.json's static dim sizes; every other dim a shape names (a dynamic one: lowered.json
    does not list them) is ``REPRESENTATIVE_M``. The compiled function's shapes are symbolic, so
    the value only has to make valid fake tensors."""

    def __missing__(self, name):
        return REPRESENTATIVE_M

    def __contains__(self, name) -> bool:
        return True


def _empty(shape, dtype, sizes):
    import torch

    return torch.empty(*shape_fn(shape)(FakeSizes(sizes)), dtype=torch_dtype(dtype))


def _operand(t, transposed, sizes, tensors):
    info = tensors[t]
    x = _empty(info["shape"], info["dtype"], sizes)
    return x.T if transposed else x


def _dtype(x) -> str:
    """A fake operand's torch dtype as its name (``float8_e4m3fn``, ``bfloat16``)."""
    return str(x.dtype).removeprefix("torch.")


def _major(x) -> str:
    return "row" if x.stride(-1) == 1 else "col"


@contextlib.contextmanager
def _epilogue_knobs(config: dict):
    """Apply a config's epilogue knobs to QuACK's sm90 GEMM for one compile; yields a dict that
    receives the stage split QuACK computed (epi_tile, ab, epi, c)."""
    from quack.gemm_sm90 import GemmSm90

    saved = {n: GemmSm90.__dict__[n] for n in KNOB_HOOKS}
    chosen: dict = {}
    epi_n, c_stages = config.get("epi_n", 0), config.get("c_stages", 0)

    def tile_rule(cta_tile, atom_layout, element_type=None, epi_tile_override=None):
        default = saved[SM90_TILE_SHAPE_HOOK].__func__(
            cta_tile, atom_layout, element_type, epi_tile_override
        )
        return (default[0], epi_n) if epi_n and epi_tile_override is None else default

    def stage_rule(cls, *args, **kwargs):
        ab, epi, c = saved[SM90_STAGES_HOOK].__func__(cls, *args, **kwargs)
        chosen.update(epi_tile=list(args[1]), ab=ab, epi=epi, c=c)
        return ab, epi, c

    setattr(GemmSm90, SM90_TILE_SHAPE_HOOK, staticmethod(tile_rule))
    setattr(GemmSm90, SM90_STAGES_HOOK, classmethod(stage_rule))
    if c_stages:
        GemmSm90.epi_c_stage_base = c_stages
    try:
        yield chosen
    finally:
        for name, value in saved.items():
            setattr(GemmSm90, name, value)


# The QuACK sm90 class attributes ``_epilogue_knobs`` replaces for one compile.
KNOB_HOOKS = (SM90_TILE_SHAPE_HOOK, SM90_STAGES_HOOK, "epi_c_stage_base")


def compile_one(mod, k: dict, meta: dict, config: dict):
    """Compile and export one lowered kernel; returns the record for SYMBOL.compiled.json."""
    import cutlass

    sizes, tensors = meta["sizes"], meta["tensors"]
    a = _operand(k["a"][0], k["a"][1], sizes, tensors)
    # QuACK's B is (N, K): acc = a' @ b' with b' = b or b.T, so B = b'.T.
    b_val = _operand(k["b"][0], k["b"][1], sizes, tensors)
    b = b_val.T
    d = _empty(k["d"][2], k["d"][1], sizes) if k["d"] else None
    c = _empty(k["c"][2], k["c"][1], sizes) if k["c"] else None
    epi, overrides = {}, {}
    for f in k["fields"]:
        if f["role"] == "scalar":
            # fp32 (load_scalar) or int64 (a philox seed or offset, Scalar(dtype=Int64))
            epi[f["name"]] = 1.0
            scalar_type = cutlass.Int64 if f["dtype"] == "int64" else cutlass.Float32
            overrides[f["name"]] = ("pointer", scalar_type)
        elif f["role"] == "group_stat":
            # A GroupStat's host arg: the group width as a plain int, a constexpr baked into
            # the kernel (the exported function takes None in this slot at run time).
            epi[f["name"]] = shape_fn(f["shape"][:1])(FakeSizes(sizes))[0]  # "head_dim" too
        elif f.get("transform") == F32_BITS:
            # QuACK's frontend checks an acc_pair output as an (M, N/2) 16-bit tensor; the
            # compiled argument is PairF32Store's (M, N) 16-bit view (its host_fake_arg).
            epi[f["name"]] = _empty(f["shape"], "bf16", sizes)
        else:
            epi[f["name"]] = _empty(f["shape"], f["dtype"], sizes)
    fn = getattr(mod, k.get("function", k["symbol"]))  # a variant compiles its fallback's fn
    start = time.perf_counter()
    kwargs = {"epi_key_overrides": overrides} if overrides else {}
    knobs = (config.get("epi_n", 0), config.get("c_stages", 0))
    if any(knobs):  # a harmless attribute that keeps these variants apart in QuACK's cache key
        kwargs["post_init_attrs"] = (("coda_epilogue_knobs", knobs),)
    with _epilogue_knobs(config) as stages:
        plan = fn.gemm(
            a,
            b,
            d,
            c,
            epi_args=epi,
            tile_M=config["tile_m"],
            tile_N=config["tile_n"],
            cluster_M=config["cluster_m"],
            cluster_N=config["cluster_n"],
            pingpong=config["pingpong"],
            persistent=True,
            _launch=False,  # QuACK's private compile-only keyword (tests/test_quack_private.py)
            add_to_output=bool(k["add_to"]) or bool(k.get("accumulate")),
            **kwargs,
        )
    compile_s = time.perf_counter() - start
    if plan.scheduler_static is None:
        raise RuntimeError(
            "plan needs per-call scheduler arguments; coda's runtime passes the static form only"
        )
    return plan, {
        "symbol": k["symbol"],
        "fields": list(plan.gemm_cls.EpilogueArguments._fields),
        "majors": {
            "A": _major(a),
            "B": _major(b),
            "D": _major(d) if d is not None else None,
            "C": _major(c) if c is not None else None,
        },
        "dtypes": {"A": _dtype(a), "B": _dtype(b)},  # the operands compiled (fp8 included)
        "max_swizzle_size": int(plan.max_swizzle_size),
        "gemm_class": plan.gemm_cls.__name__,
        "stages": stages,
        "compile_s": round(compile_s, 2),
    }


def compile_jobs(lowered: dict) -> dict:
    """Exported symbol -> (the kernel to compile, its config): the fallback kernels of
    ``lowered["kernels"]``, every variant (same generated function, its own tile config and
    partial-buffer fields) and every accumulating flavour (the fallback's function and config,
    compiled with ``add_to_output``: D += result). lowered.json of a one-config build has no
    ``variants``."""
    by_symbol = {k["symbol"]: k for k in lowered["kernels"]}
    jobs = {s: (k, lowered["config"]) for s, k in by_symbol.items()}
    for variants in lowered.get("variants", {}).values():
        for v in variants:
            kernel = dict(by_symbol[v["function"]], fields=v["fields"])
            kernel.update(symbol=v["symbol"], function=v["function"])
            jobs[v["symbol"]] = (kernel, v["config"])
    for a in lowered.get("accumulate", {}).values():
        kernel = dict(by_symbol[a["function"]], fields=a["fields"], accumulate=True)
        kernel.update(symbol=a["symbol"], function=a["function"])
        jobs[a["symbol"]] = (kernel, a["config"])
    return jobs


def main(argv: list[str]) -> int:
    build_dir = Path(argv[0])
    symbols = argv[1:]
    _setup()

    spec = importlib.util.spec_from_file_location("coda_generated_kernel", build_dir / "kernel.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["coda_generated_kernel"] = mod
    lowered = json.loads((build_dir / "lowered.json").read_text())
    try:
        spec.loader.exec_module(mod)
    except Exception:  # noqa: BLE001 - reported to the build, which maps it to the spec
        for s in symbols:
            (build_dir / f"{s}.error.txt").write_text(traceback.format_exc())
        return EXIT_TOOL_FAILURE
    jobs = compile_jobs(lowered)
    status = EXIT_OK
    for s in symbols:
        try:
            kernel, config = jobs[s]
            plan, record = compile_one(mod, kernel, lowered, config)
            start = time.perf_counter()
            obj = build_dir / f"{s}.o"
            plan.compiled_fn.export_to_c(
                str(obj), function_name=s, export_only_tvm_ffi_symbols=True
            )
            record["export_s"] = round(time.perf_counter() - start, 2)
            record["object_bytes"] = obj.stat().st_size
            (build_dir / f"{s}.compiled.json").write_text(json.dumps(record, indent=1))
            print(f"compiled {s} in {record['compile_s']}s", flush=True)
        except Exception:  # noqa: BLE001
            (build_dir / f"{s}.error.txt").write_text(traceback.format_exc())
            print(f"FAILED {s}", flush=True)
            status = EXIT_TOOL_FAILURE
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
