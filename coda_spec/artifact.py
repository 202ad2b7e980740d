"""The artifact format: ``manifest.json`` of a build directory (written by build, read by runtime).

A manifest is the complete calling contract of a built chain; the runtime reads nothing else
(plus the cubins and the library it names). Format version ``FORMAT_VERSION``; readers accept the
versions in ``READABLE_FORMATS`` and refuse others ("rebuild with this coda").

Layer map: this module is the format, read side: the version, :func:`read_manifest` /
:func:`write_manifest`, the shape evaluation the runtime uses (:func:`shape_fn`,
:func:`eval_shape`, :func:`gemm_extents`). It imports nothing from ``coda_spec.lower`` or
``coda_spec.primitives`` (a test checks it): the runtime imports it. The build-side writer that
assembles a manifest from a lowered spec is ``coda_spec.manifest``.

Format history: 2 added ``grads_in`` and ``backward_outputs``; 3 ``required`` on every input; 4
config variants; 5 host steps and finalizes compiled ahead of time (``launch``); 6 makes every
shape an expression over the spec's dims, so a build re-sizes by replacing ``dims`` (verify's
ragged and ``--dims`` cases, bench) and finalizes run only as compiled kernels. Only format 6 is
read: an older build is refused; rebuild it (and re-run ``coda tune``: tune files are keyed by
the build directory).

Shapes (format 6). Every shape -- ``inputs``, ``outputs``, ``tensors``, ``grads_in``,
``backward_outputs``, a kernel step's ``fields`` (and each variant's), ``d``/``c`` and GEMM
``m``/``n``/``k``, a finalize's ``n``, a launch's ``grid``/``args``/``outputs`` -- is a list of
expressions: an int (a literal of the spec), a dim name (``"D"``, or the dynamic ``"M"``),
``+ - * /`` of them (``"2*F"``, ``"D/2"``; ``/`` is exact) or ``cdiv(a,b)`` (a tile count,
``"cdiv(D,256)"``, ``"cdiv(M,128)"``). ``dims`` holds the sizes the build was made at (None for
the dynamic dim); :func:`shape_fn` evaluates at those plus the call's dynamic size
(``coda_spec.dims.evaluator``: the one evaluator).

Top level: ``format``, ``name``, ``digest`` (spec content hash), ``spec_file``, ``created``,
``versions`` (coda, quack, cutlass-dsl, tvm-ffi), ``config`` (the fallback tile/cluster/schedule)
and ``configs`` (every candidate, the fallback first), ``library`` (the .so), ``dims``,
``inputs`` (name, shape, dtype, ``ignore_index``, ``required``: true when some forward or
backward step reads it -- a GEMM operand, a host step's ``over``, an epilogue item's tensor --
false for inputs only ``derive`` or ``equivalent_to`` read, which the runtime accepts but
ignores), ``outputs`` (name, shape, dtype), ``tensors`` (every chain tensor: shape, dtype),
``steps`` and ``backward_steps`` (in order), ``grads_in``/``backward_outputs`` (the backward
section's incoming and outgoing gradients) and ``links`` (producer step -> consumer step,
tensor).

A kernel step records: ``symbol`` (exported function), ``mode``, ``a``/``b`` (tensor,
transposed), ``m``/``n``/``k``, ``d``/``c`` bindings (tensor, dtype, shape), ``add_to``,
``fields`` (every EpilogueArguments entry: name, role, chain tensor, buffer shape, dtype,
runtime transform, partial fold), ``field_order`` (read from the compiled plan, never
recomputed: it is not the fn's parameter order), operand ``majors``, ``max_swizzle_size``,
``acc_only`` (its epilogue is a store of acc alone) and ``variants``: the kernel compiled at
each candidate config its primitives support and whose SASS does not spill, each with its
``config``, exported ``symbol``, ``fields`` (partial-buffer shapes follow its tile),
``field_order``, ``majors``, ``max_swizzle_size``, ``compile_s``, ``object_bytes``,
``spills``; ``variants[0]`` repeats the step's own values (the fallback). The positional call
is ``f(A, B, D, C, epi_tuple, (max_active_clusters, None, max_swizzle_size, None, None, None),
None, None, None)`` with ``max_active_clusters = SM count // cluster size``.

A host step records ``over``, ``reads``, ``writes``, ``partials`` (partial tensor -> its fold)
and ``launch``; a finalize ``op``, ``of``, ``result``, ``n``, ``eps`` and ``launch`` (the Triton
cubin's entry: ``cubin``, ``name``, ``num_warps``, ``shared``, ``grid``, ``args``, ``types``,
``outputs``, ``hidden``, ``folds``; see ``coda_spec.lower.triton_aot``), or ``folded_into``
(the host step whose kernel computes it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from coda_spec.dims import evaluator, exprs

FORMAT_VERSION = 6  # 2: grads; 3: inputs[].required; 4: variants; 5: launch; 6: shape exprs
READABLE_FORMATS = (6,)  # older builds: rebuild (and re-run coda tune)
MANIFEST = "manifest.json"
_STEPS = ("steps", "backward_steps")
# Where a manifest holds shapes (``coda_spec.dims.exprs`` paths): written as expressions.
SHAPES = (
    *((key, "*", "shape") for key in ("inputs", "outputs", "grads_in", "backward_outputs")),
    ("tensors", "*", "shape"),
    (_STEPS, "*", ("m", "n", "k")),
    (_STEPS, "*", ("d", "c"), 2),
    (_STEPS, "*", "fields", "*", "shape"),
    (_STEPS, "*", "variants", "*", "fields", "*", "shape"),
    (_STEPS, "*", "n"),  # a finalize's n (and a kernel's GEMM N, above)
    (_STEPS, "*", "launch", "grid"),
    (_STEPS, "*", "launch", "args", "*", "dim"),
    (_STEPS, "*", "launch", "outputs", "*", "shape"),
)


def with_exprs(manifest: dict) -> dict:
    """A copy of ``manifest`` as it is written: every shape entry (:data:`SHAPES`) that is a
    ``coda_spec.dims.Sym`` as its expression, any other Sym as its plain int."""
    return exprs(manifest, SHAPES)


def input_required(entry: dict) -> bool:
    """Whether the runtime requires a manifest input (some forward or backward step reads it)."""
    return bool(entry["required"])


def write_manifest(directory: Path, manifest: dict) -> None:
    """Write atomically; the manifest's presence marks a build complete. A shape still held as
    a ``Sym`` is written as its expression (:func:`with_exprs`)."""
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(with_exprs(manifest), indent=1) + "\n")
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
    """A manifest shape (a list of expressions: ints, dim names, ``2*F``, ``D/2``,
    ``cdiv(D,256)``) compiled once: a function of ``sizes`` (every dim it names, the dynamic
    one included) giving the concrete sizes (``coda_spec.dims.evaluator``)."""
    fns = tuple(evaluator(d) for d in shape)
    return lambda sizes: tuple(f(sizes) for f in fns)


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
