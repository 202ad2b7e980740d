"""Ahead-of-time Triton kernels: host steps and finalizes compiled to sm_90a cubins at build time.

A :class:`TritonKernel` (made by ``host_kernel`` or ``finalize_kernel`` from a host or finalize
step) is a complete, readable Triton module (``source``), its entry point, its signature and how
the runtime binds each argument. This module compiles one with Triton's own compiler for
``GPUTarget("cuda", 90, 32)`` -- no GPU is needed, as for the GEMMs -- and writes the source and
the cubin into the build directory. What it returns is the manifest entry of the step's
``launch``. The runtime (``coda_spec/runtime/cubin.py``) loads the cubin through the CUDA driver
and launches it: deployment needs neither Triton nor a compiler, only the driver.

Contract of a compiled kernel (the manifest's ``launch`` entry)
---------------------------------------------------------------
``source``/``cubin``: paths relative to the build directory; ``name``: the cubin's entry;
``num_warps`` and ``shared`` (dynamic shared memory bytes).

``grid``: one to three entries, each a shape expression (``"M"``, ``"cdiv(D,1024)"``)
evaluated at the call's dims, or ``{"extent": [tensor, axis], "block": B}`` (cdiv of that
tensor's axis at the launch).

``args``: one entry per explicit kernel parameter, in order:

* ``{"tensor": name}``: the device pointer of that chain tensor;
* ``{"dim": expr}``: an i32, a shape expression at the call's dims;
* ``{"extent": [tensor, axis]}``: an i32, that axis of that tensor at the launch (e.g. a
  partial buffer's tile count, which follows the variant that wrote it).

``types``: the Triton type of each explicit parameter. ``outputs``: the buffers the runtime
allocates before the launch (``tensor``, ``dtype``, ``shape`` expressions, ``init``:
``"empty"`` or ``"zeros"``). ``hidden``: how many trailing pointer parameters Triton added
(global and profile scratch; both sized 0 here, so they are passed as NULL). ``folds``: the
finalize steps the kernel also computes. ``pointer_align``: every pointer argument must be a
multiple of it (16 bytes; the cubins are compiled assuming it). ``aligned`` (optional): a
second cubin (``cubin``, ``name``, ``num_warps``, ``shared``) compiled assuming the i32
arguments at ``params`` are multiples of ``multiple``; the runtime launches it when they are.

Why Triton for these steps: a host step is a row-wise elementwise pass with row reductions, and
a finalize is a small fold; Triton compiles both in about a second per kernel without a GPU and
its generated code reads like the spec. The GEMM epilogues stay in CuTe DSL around QuACK.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

TARGET_ARCH = 90
KERNEL_DIR = "kernels"  # inside the build directory: <step>.py and <step>.cubin
ALIGN = 16  # bytes of every pointer; the multiple an ``aligned`` cubin assumes of its i32s
# What every generated Triton module imports, after its docstring (host and finalize kernels).
MODULE_IMPORTS = ("import triton", "import triton.language as tl")


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
    aligned: tuple = ()  # i32 parameters a second cubin assumes are multiples of ALIGN


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


def _compile(kernel: TritonKernel, fn, assumed: tuple, path: Path):
    """One cubin of ``kernel``: every pointer parameter 16-byte aligned, and each parameter in
    ``assumed`` a multiple of ALIGN (Triton's ``tt.divisibility``); returns its metadata."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # explicit below; silences 3.9's note
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = [p for p, _ in kernel.signature]
    attrs = {
        (i,): [["tt.divisibility", ALIGN]]
        for i, (p, t) in enumerate(kernel.signature)
        if t.startswith("*") or p in assumed
    }
    signature = dict(kernel.signature)
    signature.update({k: "constexpr" for k, _ in kernel.constexprs})
    unknown = [p for p in assumed if p not in names]
    if unknown:
        raise TritonCompileError(f"{kernel.step}: aligned parameters {unknown} are not in it")
    ast = ASTSource(fn, signature=signature, constexprs=dict(kernel.constexprs), attrs=attrs)
    compiled = triton.compile(
        ast,
        target=GPUTarget("cuda", TARGET_ARCH, 32),
        options={"num_warps": kernel.num_warps, "enable_fp_fusion": True},
    )
    meta = compiled.metadata
    if getattr(meta, "global_scratch_size", 0) or getattr(meta, "profile_scratch_size", 0):
        raise TritonCompileError(
            f"{kernel.step}: the kernel needs Triton scratch memory, which coda does not provide"
        )
    path.write_bytes(compiled.asm["cubin"])
    hidden = _hidden_params(compiled.asm["ptx"], meta.name, len(kernel.signature))
    return meta, hidden


def compile_kernel(kernel: TritonKernel, directory: Path) -> dict:
    """Write ``kernel``'s source, compile it for sm_90a, write the cubin(s); return the manifest
    ``launch`` entry (paths relative to ``directory``). With ``kernel.aligned``, a second cubin
    assumes those parameters are multiples of ALIGN (``aligned`` in the entry: the runtime
    launches it when the call's values are)."""
    out = Path(directory) / KERNEL_DIR
    out.mkdir(parents=True, exist_ok=True)
    src_path = out / f"{kernel.step}.py"
    src_path.write_text(kernel.source)
    cubin = out / f"{kernel.step}.cubin"
    try:
        fn = _import_source(src_path, kernel.entry)
        meta, hidden = _compile(kernel, fn, (), cubin)
        if kernel.aligned:
            fast = out / f"{kernel.step}.aligned.cubin"
            fast_meta, _ = _compile(kernel, fn, kernel.aligned, fast)
    except TritonCompileError:
        raise
    except Exception as e:  # noqa: BLE001 - Triton's errors are many types
        raise TritonCompileError(
            f"cannot compile the Triton kernel of step '{kernel.step}' ({src_path}): {e}"
        ) from e
    entry = {
        "source": f"{KERNEL_DIR}/{src_path.name}",
        "cubin": f"{KERNEL_DIR}/{cubin.name}",
        "name": meta.name,
        "num_warps": meta.num_warps,
        "shared": meta.shared,
        "grid": list(kernel.grid),
        "args": [dict(a) for a in kernel.args],
        "types": [t for _, t in kernel.signature],
        "outputs": [dict(o) for o in kernel.outputs],
        "hidden": hidden,
        "folds": list(kernel.folds),
        "pointer_align": ALIGN,
    }
    if kernel.aligned:
        names = [p for p, _ in kernel.signature]
        entry["aligned"] = {
            "cubin": f"{KERNEL_DIR}/{fast.name}",
            "name": fast_meta.name,
            "num_warps": fast_meta.num_warps,
            "shared": fast_meta.shared,
            "params": [names.index(p) for p in kernel.aligned],
            "multiple": ALIGN,
        }
    return entry
