"""Ahead-of-time Triton kernels: host steps and finalizes compiled to sm_90a cubins at build time.

Layer map
---------
* ``coda_spec/lower/host_kernel.py`` and ``coda_spec/lower/finalize_kernel.py`` turn a spec's
  host step or finalize step into a :class:`TritonKernel`: a complete, readable Triton module
  (``source``), its entry point, its signature and how the runtime binds each argument.
* This module compiles a :class:`TritonKernel` with Triton's own compiler for
  ``GPUTarget("cuda", 90, 32)`` -- no GPU is needed, as for the GEMMs -- and writes the source
  and the cubin into the build directory. What it returns is the manifest entry of the step's
  ``launch``.
* ``coda_spec/launch.py`` (runtime side) loads the cubin through the CUDA driver and launches
  it. Deployment needs neither Triton nor a compiler, only the driver.

Contract of a compiled kernel (the manifest's ``launch`` entry)
---------------------------------------------------------------
``source``/``cubin``: paths relative to the build directory; ``name``: the cubin's entry;
``num_warps`` and ``shared`` (dynamic shared memory bytes); ``grid``: one to three shape
expressions (``"M"``, ``"cdiv(D,1024)"``) evaluated at the call's dims; ``args``: one entry per
explicit kernel parameter, in order -- ``{"tensor": name}`` (the device pointer of that chain
tensor), ``{"dim": expr}`` (an i32, a shape expression at the call's dims) or
``{"extent": [tensor, axis]}`` (an i32, that axis of that tensor as it is at the launch, e.g. a
partial buffer's tile count, which follows the variant that wrote it); ``outputs``: the
buffers the runtime allocates before the launch (``tensor``, ``dtype``, ``shape`` expressions,
``init``: ``"empty"`` or ``"zeros"``); ``hidden``: how many trailing pointer parameters Triton
added (global and profile scratch; both sized 0 here, so they are passed as NULL).

Why Triton for these steps: a host step is a row-wise elementwise pass with row reductions, and
a finalize is a small fold; Triton compiles both in about a second per kernel without a GPU and
its generated code reads like the spec. The GEMM epilogues stay in CuTe DSL around QuACK.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

TARGET_ARCH = 90
KERNEL_DIR = "kernels"  # inside the build directory: <step>.py and <step>.cubin


@dataclass(frozen=True)
class TritonKernel:
    """One Triton kernel a step compiles to.

    ``signature``: ((param, triton type), ...) for the explicit parameters, in order ("*bf16",
    "*fp32", "*i32", "i32", "fp32"); ``constexprs``: ((param, value), ...) baked in at build
    time (they follow the explicit parameters in the entry's definition). ``args`` and
    ``outputs`` as in the module docstring; ``args`` has one entry per ``signature`` entry."""

    step: str
    source: str
    entry: str
    signature: tuple
    constexprs: tuple
    args: tuple
    outputs: tuple
    grid: tuple
    num_warps: int = 4
    folds: tuple = ()  # finalize steps this kernel also computes (they launch nothing)


class TritonCompileError(RuntimeError):
    """Triton refused a generated kernel (a coda bug): the message names the step and file."""


def _import_source(path: Path, entry: str):
    """Import a generated kernel module from its file (Triton reads the function's source)."""
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    name = f"coda_kernel_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return getattr(module, entry)


def _hidden_params(ptx: str, entry: str, explicit: int) -> int:
    """Trailing parameters Triton appended to ``entry`` (scratch pointers)."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    if m is None:
        raise TritonCompileError(f"no .entry {entry} in the generated PTX")
    count = len(re.findall(r"\.param\s", m.group(1)))
    if count < explicit:
        raise TritonCompileError(
            f"{entry}: PTX has {count} parameters for {explicit} declared ones (a constant "
            "was specialised away)"
        )
    return count - explicit


def compile_kernel(kernel: TritonKernel, directory: Path) -> dict:
    """Write ``kernel``'s source, compile it for sm_90a, write the cubin; return the manifest
    ``launch`` entry (paths relative to ``directory``)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    out = Path(directory) / KERNEL_DIR
    out.mkdir(parents=True, exist_ok=True)
    src_path = out / f"{kernel.step}.py"
    src_path.write_text(kernel.source)
    try:
        fn = _import_source(src_path, kernel.entry)
        signature = dict(kernel.signature)
        signature.update({k: "constexpr" for k, _ in kernel.constexprs})
        ast = ASTSource(fn, signature=signature, constexprs=dict(kernel.constexprs))
        compiled = triton.compile(
            ast,
            target=GPUTarget("cuda", TARGET_ARCH, 32),
            options={"num_warps": kernel.num_warps, "enable_fp_fusion": True},
        )
    except Exception as e:  # noqa: BLE001 - Triton's errors are many types
        raise TritonCompileError(
            f"cannot compile the Triton kernel of step '{kernel.step}' ({src_path}): {e}"
        ) from e
    meta = compiled.metadata
    if meta.global_scratch_size or meta.profile_scratch_size:
        raise TritonCompileError(
            f"{kernel.step}: the kernel needs Triton scratch memory, which coda does not provide"
        )
    cubin = out / f"{kernel.step}.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    return {
        "source": f"{KERNEL_DIR}/{src_path.name}",
        "cubin": f"{KERNEL_DIR}/{cubin.name}",
        "name": meta.name,
        "num_warps": meta.num_warps,
        "shared": meta.shared,
        "grid": list(kernel.grid),
        "args": [dict(a) for a in kernel.args],
        "types": [t for _, t in kernel.signature],
        "outputs": [dict(o) for o in kernel.outputs],
        "hidden": _hidden_params(compiled.asm["ptx"], meta.name, len(kernel.signature)),
        "folds": list(kernel.folds),
    }
