"""The artifact format: ``manifest.json`` of a build directory (written by build, read by runtime).

A manifest is the complete calling contract of a built chain; the runtime reads nothing else
(plus the cubins and the library it names). Format version ``FORMAT_VERSION``; readers accept the
versions in ``READABLE_FORMATS`` and refuse others.

Format history: 2 added ``grads_in`` and ``backward_outputs`` (the runtime runs backward
sections). 3 adds ``required`` to every entry of ``inputs``: true when some forward or backward
step reads the input (a GEMM operand, a host step's ``over``, or an epilogue item's tensor),
false for inputs only ``derive`` expressions or ``equivalent_to`` read. The runtime requires the
former and accepts, but ignores and does not validate, the latter. A format-2 manifest has no
``required``: every input is required. 4 adds config variants: ``configs`` (every candidate
config asked for, the first is the fallback) and, on each kernel step, ``variants``: the kernel
compiled at each candidate its primitives support and whose SASS does not spill, each with its
``config``, exported ``symbol``, ``fields`` (partial-buffer shapes follow the tile),
``field_order``, ``majors``, ``max_swizzle_size``, ``compile_s``, ``object_bytes``, ``spills``.
``variants[0]`` repeats the step's own values (the fallback). Format 2/3 steps have no
``variants``: one variant, at ``config``. 5 compiles host steps and finalizes ahead of time:
a host step and a finalize carry ``launch`` (the Triton cubin's entry: ``cubin``, ``name``,
``num_warps``, ``shared``, ``grid``, ``args``, ``types``, ``outputs``, ``hidden``, ``folds``;
see ``coda_spec.lower.triton_aot``), a finalize that a host kernel computes carries
``folded_into`` (that host step) instead, a host step lists its ``partials`` (tensor -> fold)
and a kernel step says whether its epilogue is ``acc_only`` (a store of acc alone). A format
2-4 build still loads; its finalizes fold in torch and its host steps are refused (rebuild).

Top level: ``format``, ``name``, ``digest`` (spec content hash), ``versions`` (coda, quack,
cutlass-dsl, tvm-ffi), ``config`` (tile/cluster/schedule), ``library`` (the .so), ``dims``,
``inputs`` (name, shape expression, dtype, ``ignore_index``, ``required``), ``outputs`` (name,
shape expression, dtype), ``tensors`` (every chain tensor), ``steps``
and ``backward_steps`` (in order), ``grads_in``/``backward_outputs`` (the backward section's
incoming and outgoing gradients) and ``links`` (producer step -> consumer step, tensor).

A kernel step records: ``symbol`` (exported function), ``mode``, ``a``/``b`` (tensor,
transposed), ``d``/``c`` bindings, ``add_to``, ``fields`` (every EpilogueArguments entry: role,
chain tensor, buffer shape expression, dtype, runtime transform, partial fold), ``field_order``
(read from the compiled plan, never recomputed: it is not the fn's parameter order), operand
``majors`` and ``max_swizzle_size``. The positional call is
``f(A, B, D, C, epi_tuple, (max_active_clusters, None, max_swizzle_size, None, None, None),
None, None, None)`` with ``max_active_clusters = SM count // cluster size``.
Shape expressions are ints, dim names, or ``cdiv(<dim>,<tile>)`` for partial buffers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

FORMAT_VERSION = 5  # 2: grads_in, backward_outputs; 3: inputs[].required; 4: variants; 5: launch
READABLE_FORMATS = (2, 3, 4, 5)  # a format-2 manifest reads as "every input required"
MANIFEST = "manifest.json"


def compiler_lib_dirs() -> list[tuple[str, str]]:
    """(directory, library) pairs to link against (build side)."""
    res = subprocess.run(
        [sys.executable, "-m", "cutlass.cute.export.aot_config", "--libdir"],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        from coda_spec.errors import ToolError

        raise ToolError(
            "cannot locate libcute_dsl_runtime (is nvidia-cutlass-dsl installed? "
            "pip install 'coda-spec[build]')"
        )
    import tvm_ffi.libinfo

    return [
        (res.stdout.strip().splitlines()[-1], "cute_dsl_runtime"),
        (os.path.dirname(tvm_ffi.libinfo.find_libtvm_ffi()), "tvm_ffi"),
    ]


def _variant(v: dict, rec: dict) -> dict:
    return {
        "config": v["config"],
        "symbol": v["symbol"],
        "fields": v["fields"],
        "field_order": rec["fields"],
        "majors": rec["majors"],
        "max_swizzle_size": rec["max_swizzle_size"],
        "compile_s": rec["compile_s"],
        "object_bytes": rec["object_bytes"],
        "spills": rec.get("spills"),
    }


def _step_data(step, info, kernels_by_step, records_by_symbol, analysis, lowered, launches) -> dict:
    if step.kind == "kernel":
        k = dict(kernels_by_step[step.name])
        rec = records_by_symbol[k["symbol"]]
        k.update(
            kind="kernel",
            name=step.name,
            field_order=rec["fields"],
            majors=rec["majors"],
            max_swizzle_size=rec["max_swizzle_size"],
            compile_s=rec["compile_s"],
            object_bytes=rec["object_bytes"],
            line=step.loc.line,
            acc_only=_acc_only(step),
        )
        listed = lowered.get("variants", {}).get(step.name) or [
            {"config": lowered["config"], "symbol": k["symbol"], "fields": k["fields"]}
        ]  # variants dropped after compile (spills) have no record
        k["variants"] = [
            _variant(v, records_by_symbol[v["symbol"]])
            for v in listed
            if v["symbol"] in records_by_symbol
        ]
        return k
    if step.kind == "finalize":
        data = finalize_data(step, analysis)
        if step.name in launches:
            data["launch"] = launches[step.name]
        folder = next((s for s, e in launches.items() if step.name in e.get("folds", ())), None)
        if folder is not None:
            data["folded_into"] = folder
        return data
    data = {
        "kind": "host",
        "name": step.name,
        "over": step.over,
        "reads": list(info.reads),
        "writes": list(info.writes),
        "line": step.loc.line,
        "partials": _host_partials(info, analysis),  # what a reduction over zero rows gives
    }
    if step.name in launches:
        data["launch"] = launches[step.name]
    return data


def _host_partials(info, analysis) -> dict:
    """partial -> its fold (the first a finalize may use; ``primitives/_reduce.FOLDS``). Build
    side only: the runtime, which imports this module, must not load the primitive registry."""
    from coda_spec.primitives._reduce import FOLDS

    return {
        t: FOLDS[analysis.tensor(t).partial[1]][0]
        for t in info.writes
        if analysis.tensor(t).origin == "partial"
    }


def finalize_data(step, analysis) -> dict:
    """A finalize step as the manifest records it (``n`` defaults to the reduced extent)."""
    part = analysis.tensor(step.of).partial
    kind, _, width, group, rows = part
    n = step.n if step.n is not None else (group or width if kind == "rowpart" else rows)
    return {
        "kind": "finalize",
        "name": step.name,
        "op": step.op,
        "of": step.of,
        "result": step.result,
        "n": n,
        "eps": step.eps,
        "line": step.loc.line,
    }


def _acc_only(step) -> bool:
    """Whether a kernel's epilogue is ``store acc`` alone (a GEMM with an empty K then writes
    zeros; the runtime needs no launch for that)."""
    ops = list(step.epilogue)
    return len(ops) == 1 and ops[0].prim == "store" and ops[0].get("store") == "acc"


def step_reads(checked) -> set:
    """Every chain tensor some forward or backward step reads: GEMM operands, host steps'
    ``over``, epilogue items' tensors (the ``reads`` of the analysis, add_to included)."""
    spec, a = checked.spec, checked.analysis
    reads: set = set()
    for s in spec.all_steps():
        if s.kind == "kernel":
            reads |= {s.gemm.a.name, s.gemm.b.name}
        elif s.kind == "host":
            reads.add(s.over)
    for info in list(a.steps) + list(a.backward_steps):
        reads |= set(info.reads)
    return reads


def input_required(entry: dict) -> bool:
    """Whether the runtime requires a manifest input (format 2 has no flag: all are)."""
    return bool(entry.get("required", True))


def make_manifest(
    checked, lowered: dict, records: list[dict], library: str | None, launches: dict | None = None
) -> dict:
    """The manifest of a build. ``launches``: {step: launch entry} of the compiled host steps
    and finalizes (``coda_spec.lower.triton_aot``)."""
    from coda_spec.lower.module import tool_versions

    spec, a = checked.spec, checked.analysis
    read = step_reads(checked)
    kernels = {k["step"]: k for k in lowered["kernels"]}
    recs = {r["symbol"]: r for r in records}
    steps = [
        _step_data(s, i, kernels, recs, a, lowered, launches or {})
        for s, i in zip(spec.steps, a.steps, strict=True)
    ]
    bsteps = []
    if spec.backward is not None:
        bsteps = [
            _step_data(s, i, kernels, recs, a, lowered, launches or {})
            for s, i in zip(spec.backward.steps, a.backward_steps, strict=True)
        ]
    producer = {t.name: t.producer for t in a.tensors}
    links = []
    for info in list(a.steps) + list(a.backward_steps):
        for t in info.reads:
            if producer.get(t):
                links.append({"from": producer[t], "to": info.name, "tensor": t})
    return {
        "format": FORMAT_VERSION,
        "name": spec.name,
        "digest": spec.digest,
        "spec_file": spec.file,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": tool_versions(),
        "config": lowered["config"],
        "configs": lowered.get("configs", [lowered["config"]]),
        "library": library,
        "dims": {d.name: d.size for d in spec.dims},
        "inputs": [
            {
                "name": t.name,
                "shape": list(t.shape),
                "dtype": t.dtype,
                "ignore_index": t.ignore_index,
                "required": t.name in read,
            }
            for t in spec.tensors
        ],
        "outputs": [
            {"name": o.name, "dtype": o.dtype, "shape": list(a.tensor(o.name).shape)}
            for o in spec.outputs
        ],
        "tensors": lowered["tensors"],
        "steps": steps,
        "backward_steps": bsteps,
        "grads_in": [
            {"name": t.name, "shape": list(t.shape), "dtype": t.dtype}
            for t in a.tensors
            if t.origin == "grad_in"
        ],
        "backward_outputs": [
            {"name": o.name, "dtype": o.dtype, "shape": list(a.tensor(o.name).shape)}
            for o in (spec.backward.outputs if spec.backward else ())
        ],
        "links": links,
    }


def write_manifest(directory: Path, manifest: dict) -> None:
    """Write atomically; the manifest's presence marks a build complete."""
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, directory / MANIFEST)


def read_manifest(directory) -> dict:
    path = Path(directory) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"{directory}: no {MANIFEST}; not a complete coda build (run coda build first)"
        ) from e
    if data.get("format") not in READABLE_FORMATS:
        raise ValueError(
            f"{path}: manifest format {data.get('format')} is not one of "
            f"{', '.join(map(str, READABLE_FORMATS))}; rebuild with this coda"
        )
    return data


def shape_fn(shape):
    """A manifest shape expression compiled once: a function of ``sizes`` giving concrete
    sizes. Entries are ints, dim names, ``cdiv(<dim>,<int>)`` (partial buffers) or decimal
    strings."""
    parts = []
    for d in shape:
        if isinstance(d, int):
            parts.append((0, d, 1))
        elif isinstance(d, str) and d.startswith("cdiv("):
            a, b = d[5:-1].split(",")
            a = a.strip()
            parts.append((1, int(a), int(b)) if a.lstrip("-").isdigit() else (2, a, int(b)))
        elif isinstance(d, str) and d.lstrip("-").isdigit():
            parts.append((0, int(d), 1))
        else:
            parts.append((3, d, 1))

    def at(sizes: dict) -> tuple:
        out = []
        for kind, x, div in parts:
            if kind == 0:
                out.append(x)
            elif kind == 1:
                out.append(-(-x // div))
            elif kind == 2:
                out.append(-(-int(sizes[x]) // div))
            else:
                out.append(int(sizes[x]))
        return tuple(out)

    return at


def eval_shape(shape, sizes: dict) -> tuple:
    """Concrete sizes of a manifest shape expression."""
    return shape_fn(shape)(sizes)


def gemm_extents(manifest: dict, step: dict, sizes: dict) -> tuple[int, int, int]:
    """(M, N, K) of a kernel step's GEMM ``acc = a' @ b'`` at ``sizes``."""
    tensors = manifest["tensors"]
    (a_t, a_tr), (b_t, b_tr) = step["a"], step["b"]
    a = eval_shape(tensors[a_t]["shape"], sizes)
    b = eval_shape(tensors[b_t]["shape"], sizes)
    a, b = (a[::-1] if a_tr else a), (b[::-1] if b_tr else b)
    return a[0], b[1], a[1]
