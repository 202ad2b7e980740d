"""The work a chain must do, from its manifest: GEMM flops and the fewest bytes it must move.

Speed of light (SoL) in ``coda bench`` has two parts:

* **GEMMs**: the chain's GEMMs through cuBLAS (``torch.mm`` on the same operand views),
  *measured* in the same rounds as the chain; coda's fused kernels do that GEMM work plus their
  epilogues, so coda / SoL near 1.0 means the epilogue is free.
* **Steps without a GEMM** (host steps such as RoPE backward or cross-entropy): the memory
  roofline, ``bytes / copy bandwidth``, with the bandwidth measured on the device (a large
  device-to-device copy, bytes read + written per second). A chain with no GEMM at all
  (``memory``) is all roofline; a chain with both (``gemm+memory``) adds the two.

Bytes are the minimum traffic of a section (forward, backward, or both): every tensor the
section reads but does not produce is read once, every tensor it declares as an output is
written once; intermediates (partial buffers, tensors one step writes and a later one reads)
are free, as in an ideal fusion. Finalize steps are tiny and count nothing. An ``add_to`` output
reads the tensor it accumulates into (that tensor is a section input) and writes the result.

Flops count the GEMMs only (2·M·N·K each); epilogue arithmetic is not counted.

Pure functions over a typed manifest (``coda_spec.artifact.Manifest``) and a ``sizes``
mapping; shapes are evaluated with ``coda_spec.artifact.eval_shape`` and element sizes come
from the one dtype table (``coda_spec.dtypes``), so this module has no table of its own and
needs no torch.
"""

from __future__ import annotations

from coda_spec.artifact import eval_shape, gemm_extents
from coda_spec.dtypes import element_bytes


def section_steps(manifest, direction: str) -> list:
    if direction == "fwd":
        return list(manifest.steps)
    if direction == "bwd":
        return list(manifest.backward_steps)
    if direction == "fwd+bwd":
        return list(manifest.all_steps)
    raise ValueError(f"unknown direction {direction!r}")


def section_outputs(manifest, direction: str) -> list[str]:
    fwd = [o.name for o in manifest.outputs]
    bwd = [o.name for o in manifest.backward_outputs]
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[direction]


def tensor_bytes(manifest, name: str, sizes: dict) -> int:
    t = manifest.tensors[name]
    n = 1
    for d in eval_shape(t.shape, sizes):
        n *= d
    return n * element_bytes(t.dtype)


def min_bytes(manifest, steps: list, outputs: list[str], sizes: dict) -> int:
    """Each tensor the steps read before any of them writes it, once; each output, once."""
    produced: set[str] = set()
    read_in: list[str] = []
    for s in steps:
        if s.kind == "finalize":
            produced.update(s.tensors_written())
            continue
        for n in s.tensors_read():
            if n not in produced and n not in read_in:
                read_in.append(n)
        produced.update(s.tensors_written())
    return sum(tensor_bytes(manifest, n, sizes) for n in dict.fromkeys(read_in + outputs))


def gemm_flops(manifest, step, sizes: dict) -> int:
    m, n, k = gemm_extents(step, lambda t: eval_shape(manifest.tensors[t].shape, sizes))
    return 2 * m * n * k


def step_bytes(manifest, step, sizes: dict) -> int:
    """One step alone: everything it reads, everything it writes (its own minimum traffic)."""
    names = dict.fromkeys(step.tensors_read() + step.tensors_written())
    return sum(tensor_bytes(manifest, n, sizes) for n in names)


def sol_kind(steps: list) -> str:
    kernels = any(s.kind == "kernel" for s in steps)
    hosts = any(s.kind == "host" for s in steps)
    return "gemm+memory" if kernels and hosts else ("gemm" if kernels else "memory")


def roofline_ms(nbytes: float, copy_gbps: float) -> float:
    """Milliseconds to move ``nbytes`` at ``copy_gbps`` (GB/s, read + written)."""
    return nbytes / (copy_gbps * 1e6) if copy_gbps else 0.0


def sol_ms(
    manifest,
    steps: list,
    outputs: list[str],
    sizes: dict,
    gemm_ms: float | None,
    copy_gbps: float,
) -> float:
    """The section's speed of light: measured cuBLAS GEMMs + host steps at the roofline; a
    section without GEMMs is its whole minimum traffic at the roofline."""
    kind = sol_kind(steps)
    if kind == "memory":
        return roofline_ms(min_bytes(manifest, steps, outputs, sizes), copy_gbps)
    host = sum(step_bytes(manifest, s, sizes) for s in steps if s.kind == "host")
    return (gemm_ms or 0.0) + roofline_ms(host, copy_gbps)
