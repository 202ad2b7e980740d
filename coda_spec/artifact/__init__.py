"""The artifact format: ``manifest.json`` of a build directory (written by build, read by runtime).

A manifest is the complete calling contract of a built chain; the runtime reads nothing else
(plus the cubins and the library it names). Format version ``FORMAT_VERSION``; readers accept the
versions in ``READABLE_FORMATS`` and refuse others ("rebuild with this coda").

This module is the format, read side: the version, :func:`read_manifest` (the JSON
read once into the frozen records below: :class:`Manifest`, :class:`KernelStep`,
:class:`Variant`, :class:`Field`, :class:`HostStep`, :class:`FinalizeStep`, :class:`Launch`),
:func:`write_manifest`, and the shape evaluation (:func:`shape_fn`, :func:`eval_shape`). Readers
(runtime, verify, bench, tune) use attributes, never string keys; a malformed manifest is one
``ValueError`` naming the file and the missing or mistyped entry. :class:`Field` is also the
record the lowering declares an EpilogueArguments entry with. It imports nothing from
``coda_spec.lower`` or ``coda_spec.primitives`` (a test checks it): the runtime imports it. The
build-side writer that assembles a manifest from a lowered spec is ``coda_spec.artifact.manifest``.

Format history (the one record of it: ``FORMAT_VERSION``, docs/build.md and docs/runtime.md
point here; CHANGELOG.md tells each release's change; tests/test_packaging.py checks that every
version up to ``FORMAT_VERSION`` has its line):

* 1: the first format: ``format``, ``name``, ``digest``, ``versions``, ``config``, ``library``,
  ``dims``, ``inputs``/``outputs``, ``tensors``, ``steps``, ``backward_steps``, ``links``.
* 2: adds ``grads_in`` and ``backward_outputs`` (the backward section's gradients).
* 3: adds ``required`` on every input.
* 4: config variants (``configs`` at the top, ``variants`` on each kernel step).
* 5: host steps and finalizes compiled ahead of time (``launch`` on those steps, ``folded_into``
  on a finalize a host kernel computes, ``partials`` on host steps, ``acc_only`` on kernel steps).
* 6: every shape an expression over the spec's dims (5 wrote the values folded at the build's
  dims: ``4096``, not ``"D"``), so a build re-sizes by replacing ``dims`` (verify's ragged and
  ``--dims`` cases, bench); finalizes run only as compiled kernels.
* 7: each variant's ``name`` (its config text, written once, at build) and each gradient's ``of``.
* 8: ``accumulate`` on every kernel step (the accumulating kernel of a weight gradient, or null).
* 9: the row table (field role ``rows``), row-vector transforms (``repeat``, ``as_uint8``), int64
  scalar fields, and a finalize's ``over`` and ``second`` (a format-8 reader would misread them).

A launch output may carry ``over`` (format 9 still: a host step's ``store ... over: t``; the
runtime binds the output to ``t``'s buffer). The key only saves memory: a reader that ignores it
allocates a buffer of its own and computes the same values, so no format number changed (the
format is part of every build's hash, and the shipped tune table is keyed by it).

The formats read are ``READABLE_FORMATS`` (8 and 9: an 8 holds none of 9's keys); an older build
is refused with "rebuild with this coda": rebuild it, and re-run ``coda tune`` (tune files are
keyed by the build directory).

Shapes (format 6 on). Every shape -- ``inputs``, ``outputs``, ``tensors``, ``grads_in``,
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
section's incoming and outgoing gradients, each with ``of``: the forward tensor it is the
gradient of, from the spec's ``backward.grads``) and ``links`` (producer step -> consumer step,
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
``spills`` and ``name`` (the config text); ``variants[0]`` repeats the step's own values (the
fallback). ``accumulate`` (format 8) is null, or a variant record of the same kernel at the
fallback config compiled with QuACK's ``add_to_output`` (D += the epilogue's result, through a
TMA reduce-add store). A backward kernel step gets one when its D is a weight gradient (a
backward output that is the gradient of a chain input, with no dynamic dim in its shape),
written with no ``add_to``, no C operand, in plain mode, as fp32, bf16 or fp16, and read by no
later step: a backward can then add that gradient into an existing tensor in place (a
``.grad``: ``Chain.backward(accumulate=...)``, the torch op's ``fuse_grad_accum``). How the
runtime calls an exported kernel is ``coda_spec.runtime.launch.quack_gemm``.

A host step records ``over``, ``reads``, ``writes``, ``partials`` (partial tensor -> its fold)
and ``launch``; a finalize ``op``, ``of``, ``result``, ``n``, ``eps`` and ``launch`` (the Triton
cubin's entry: ``cubin``, ``name``, ``num_warps``, ``shared``, ``grid``, ``args``, ``types``,
``outputs``, ``hidden``, ``folds``; see ``coda_spec.lower.triton_aot``), or ``folded_into``
(the host step whose kernel computes it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from coda_spec.dims import dynamic_dim, evaluator, exprs

FORMAT_VERSION = 9  # what each version added: "Format history" in this module's docstring
READABLE_FORMATS = (8, 9)  # 8 has none of 9's keys; older builds: rebuild (and re-run coda tune)
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
    (_STEPS, "*", "accumulate", "fields", "*", "shape"),
    (_STEPS, "*", "n"),  # a finalize's n (and a kernel's GEMM N, above)
    (_STEPS, "*", "launch", "grid"),
    (_STEPS, "*", "launch", "args", "*", "dim"),
    (_STEPS, "*", "launch", "outputs", "*", "shape"),
)
# Field roles: what a kernel reads from the chain, what it writes, and which of those are fp32
# partial buffers (a ``group_stat`` is neither: its group width is baked into the kernel; nor is
# ``columns`` or ``rows``, tables the runtime makes).
READ_ROLES = frozenset({"tile", "index", "row", "col", "scalar"})
WRITE_ROLES = frozenset({"aux", "select", "colred", "rowred", "group_out"})
PARTIAL_ROLES = frozenset({"colred", "rowred", "group_out"})
# The transform of an acc_pair kernel's half-width fp32 output field: the (M, W) fp32 chain
# tensor is passed as its (M, 2 W) bfloat16 view, the bytes a full-width 16-bit store writes
# (``coda_spec.lower.quack_ops.pair_f32``); the compile passes an (M, W) bfloat16 stand-in.
F32_BITS = "f32_bits"
SPLIT_K = frozenset({"split_k_semaphore", "split_k_workspace"})  # QuACK's, passed as None

Expr = Any  # a shape expression: an int literal or a dim expression text ("D", "cdiv(M,128)")


class ManifestError(ValueError):
    """A manifest.json that is not a complete manifest of this format."""


def _frozen(d) -> MappingProxyType:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class Field:
    """One entry of a kernel's EpilogueArguments, fed from (or written to) a chain tensor. The
    lowering declares it (``coda_spec.primitives.lower_api``), the manifest records it, the runtime
    binds
    it."""

    name: str  # the QuACK op name (= the EpilogueArguments field)
    tensor: str  # chain tensor ("" for a columns table)
    # tile | row | col | scalar | index | aux | colred | rowred | lse | select
    # | group_stat (a GroupStat op: the int group width, shape (group,), baked in at compile
    #   time; None at run time) | group_out (its finalized per-(row, group) values, complete)
    # | columns (fp32 0 .. N - 1, shape (1, N): the runtime's table of global column indices)
    # | rows (fp32 0 .. M - 1, shape (1, M): the runtime's table of global row indices)
    role: str
    shape: tuple  # buffer shape passed to the kernel (expressions over the dims)
    dtype: str
    # runtime view/conversion: "" | "to_fp32" | "as_uint8" (a bool tile's bytes) | a "+"-joined
    # pipeline over a row vector of "repeat" (a per-head vector repeated to the field's width)
    # and "turns_table" (RoPE's) | "f32_bits" (F32_BITS: an aux fp32 tile passed as its bytes)
    transform: str = ""
    fold: str = ""  # partial buffers: how a finalize folds them (sum | max | logsumexp)

    @property
    def reads(self) -> bool:
        """The kernel reads this chain tensor."""
        return self.role in READ_ROLES

    @property
    def writes(self) -> bool:
        """The kernel writes this chain tensor (an aux tile, a gathered column, partials)."""
        return self.role in WRITE_ROLES

    @property
    def partial(self) -> bool:
        """An fp32 buffer of per-tile partials (or group statistics) the kernel writes."""
        return self.role in PARTIAL_ROLES

    @classmethod
    def from_data(cls, d: dict) -> Field:
        return cls(
            d["name"],
            d["tensor"],
            d["role"],
            tuple(d["shape"]),
            d["dtype"],
            d.get("transform", ""),
            d.get("fold", ""),
        )


@dataclass(frozen=True)
class Tensor:
    """A declared tensor: an input, output, incoming or outgoing gradient, or any chain tensor."""

    name: str
    shape: tuple
    dtype: str
    ignore_index: int | None = None
    required: bool = True  # inputs: some step reads it (else only derive/equivalent_to do)
    of: str | None = (
        None  # a gradient (grads_in, backward_outputs): the tensor it is the gradient of
    )

    @classmethod
    def from_data(cls, d: dict, name: str | None = None) -> Tensor:
        return cls(
            name if name is not None else d["name"],
            tuple(d["shape"]),
            d["dtype"],
            d.get("ignore_index"),
            bool(d.get("required", True)),
            d.get("of"),
        )


@dataclass(frozen=True)
class Operand:
    """A GEMM operand: the chain tensor and whether the spec transposes it (``w.T``)."""

    tensor: str
    transposed: bool


@dataclass(frozen=True)
class Binding:
    """A kernel's D (written) or C (read) tensor."""

    tensor: str
    dtype: str
    shape: tuple


@dataclass(frozen=True)
class Variant:
    """A kernel compiled at one tile config. ``name`` is the config in ``--config`` syntax
    (``128x128,cluster=2x1,pingpong``), written once, at build."""

    name: str
    config: MappingProxyType
    symbol: str
    fields: tuple  # tuple[Field, ...]: partial-buffer shapes follow this variant's tile
    field_order: tuple  # the compiled EpilogueArguments order (read from the plan, not recomputed)
    majors: MappingProxyType  # {"A": "row" | "col", "B": ...}
    max_swizzle_size: int
    compile_s: float = 0.0
    object_bytes: int = 0
    spills: int | None = None

    @property
    def cluster_size(self) -> int:
        return int(self.config["cluster_m"]) * int(self.config["cluster_n"])

    @classmethod
    def from_data(cls, d: dict) -> Variant:
        return cls(
            d["name"],
            _frozen(d["config"]),
            d["symbol"],
            tuple(Field.from_data(f) for f in d["fields"]),
            tuple(d["field_order"]),
            _frozen(d["majors"]),
            int(d["max_swizzle_size"]),
            d.get("compile_s", 0.0),
            d.get("object_bytes", 0),
            d.get("spills"),
        )


@dataclass(frozen=True)
class KernelStep:
    """A GEMM with its fused epilogue. ``variants[0]`` is the fallback (the step's own config);
    ``fields`` are the fallback's."""

    kind: ClassVar[str] = "kernel"
    name: str
    line: int | None
    mode: str  # plain | acc_pair | packed_cd_b16x2
    a: Operand
    b: Operand
    m: Expr
    n: Expr
    k: Expr
    d: Binding | None
    c: Binding | None
    add_to: str | None  # D accumulates into this chain tensor, in place
    fields: tuple  # tuple[Field, ...]
    acc_only: bool  # the epilogue stores acc alone (an empty K writes zeros, no launch)
    variants: tuple  # tuple[Variant, ...], never empty
    # the fallback config compiled with D += result (QuACK's add_to_output): a weight gradient's
    # kernel, which a backward may run to add the gradient into an existing tensor (.grad)
    accumulate: Variant | None = None

    @property
    def fallback(self) -> Variant:
        return self.variants[0]

    def tensors_read(self) -> list[str]:
        """The chain tensors the kernel reads, in order (operands, C, add_to, input fields).
        Every step record has ``tensors_read`` and ``tensors_written``."""
        out = [self.a.tensor, self.b.tensor]
        out += [self.c.tensor] if self.c else []
        out += [self.add_to] if self.add_to else []
        return out + [f.tensor for f in self.fields if f.reads]

    def tensors_written(self) -> list[str]:
        return ([self.d.tensor] if self.d else []) + [f.tensor for f in self.fields if f.writes]

    @classmethod
    def from_data(cls, d: dict, manifest: str) -> KernelStep:
        if not d.get("variants"):
            raise ManifestError(
                f"{manifest}: kernel step '{d.get('name')}' has no variants; rebuild the spec "
                "with this coda"
            )
        bind = lambda b: Binding(b[0], b[1], tuple(b[2])) if b is not None else None
        return cls(
            d["name"],
            d.get("line"),
            d["mode"],
            Operand(d["a"][0], bool(d["a"][1])),
            Operand(d["b"][0], bool(d["b"][1])),
            d["m"],
            d["n"],
            d["k"],
            bind(d["d"]),
            bind(d["c"]),
            d["add_to"],
            tuple(Field.from_data(f) for f in d["fields"]),
            bool(d.get("acc_only", False)),
            tuple(Variant.from_data(v) for v in d["variants"]),
            Variant.from_data(d["accumulate"]) if d["accumulate"] is not None else None,
        )


@dataclass(frozen=True)
class Arg:
    """A compiled step's explicit parameter: a chain tensor's pointer (``tensor``), an i32 dim
    expression (``dim``), or an i32 axis of a tensor at the launch (``extent`` // ``div``)."""

    tensor: str | None = None
    dim: Expr = None
    extent: tuple | None = None  # (tensor, axis)
    div: int = 1

    @classmethod
    def from_data(cls, d: dict) -> Arg:
        ext = d.get("extent")
        return cls(d.get("tensor"), d.get("dim"), tuple(ext) if ext else None, d.get("div", 1))


@dataclass(frozen=True)
class Output:
    """A buffer the runtime allocates before a compiled step's launch, or, with ``over``, the
    buffer of the tensor a host step's store writes over (``store ... over:``): no allocation,
    no poison (it holds the values the step reads before it overwrites them)."""

    tensor: str
    dtype: str
    shape: tuple
    zeros: bool  # init "zeros" (else "empty")
    over: str | None = None


@dataclass(frozen=True)
class Cubin:
    """One cubin file and its entry (paths relative to the build directory)."""

    cubin: str
    name: str
    num_warps: int
    shared: int


@dataclass(frozen=True)
class Launch:
    """A host step's or finalize's compiled kernel (``coda_spec.lower.triton_aot``). ``grid``
    entries are expressions or ``{"extent": [tensor, axis], "block": B}``; ``aligned``: a second
    cubin assuming the i32 arguments at ``aligned_params`` are multiples of
    ``aligned_multiple``."""

    cubin: Cubin
    source: str
    grid: tuple
    args: tuple  # tuple[Arg, ...]
    types: tuple  # Triton type of each explicit parameter
    outputs: tuple  # tuple[Output, ...]
    hidden: int
    folds: tuple
    pointer_align: int
    aligned: Cubin | None = None
    aligned_params: tuple = ()
    aligned_multiple: int = 1

    @classmethod
    def from_data(cls, d: dict) -> Launch:
        cub = lambda e: Cubin(e["cubin"], e["name"], int(e["num_warps"]), int(e["shared"]))
        fast = d.get("aligned")
        return cls(
            cub(d),
            d.get("source", ""),
            tuple(g if isinstance(g, (int, str)) else _frozen(g) for g in d["grid"]),
            tuple(Arg.from_data(a) for a in d["args"]),
            tuple(d["types"]),
            tuple(
                Output(
                    o["tensor"],
                    o["dtype"],
                    tuple(o["shape"]),
                    o.get("init") == "zeros",
                    o.get("over"),
                )
                for o in d["outputs"]
            ),
            int(d.get("hidden", 0)),
            tuple(d.get("folds", ())),
            int(d.get("pointer_align", 1)),
            cub(fast) if fast else None,
            tuple(fast["params"]) if fast else (),
            int(fast["multiple"]) if fast else 1,
        )


@dataclass(frozen=True)
class HostStep:
    """A row-wise pass between kernels, compiled to a Triton cubin."""

    kind: ClassVar[str] = "host"
    name: str
    line: int | None
    over: str
    reads: tuple
    writes: tuple
    partials: MappingProxyType  # partial tensor -> its fold (what zero rows give)
    launch: Launch | None

    def tensors_read(self) -> list[str]:
        return list(self.reads)

    def tensors_written(self) -> list[str]:
        return list(self.writes)

    @classmethod
    def from_data(cls, d: dict, manifest: str) -> HostStep:
        launch = Launch.from_data(d["launch"]) if d.get("launch") else None
        partials = _frozen(d.get("partials", {}))
        return cls(
            d["name"],
            d.get("line"),
            d["over"],
            tuple(d["reads"]),
            tuple(d["writes"]),
            partials,
            launch,
        )


@dataclass(frozen=True)
class FinalizeStep:
    """A fold of a reduction's partials into a chain tensor: a compiled kernel, or computed by
    the host kernel before it (``folded_into``)."""

    kind: ClassVar[str] = "finalize"
    name: str
    line: int | None
    op: str
    of: str
    result: str
    n: Expr
    eps: float | None
    launch: Launch | None
    folded_into: str | None
    over: str | None = None  # rows | cols: folded to one [] scalar
    second: str | None = None  # an op's second partial (var's sumsq)

    def tensors_read(self) -> list[str]:
        return [self.of] + ([self.second] if self.second else [])

    def tensors_written(self) -> list[str]:
        return [self.result]

    @classmethod
    def from_data(cls, d: dict, manifest: str) -> FinalizeStep:
        launch = Launch.from_data(d["launch"]) if d.get("launch") else None
        return cls(
            d["name"],
            d.get("line"),
            d["op"],
            d["of"],
            d["result"],
            d["n"],
            d["eps"],
            launch,
            d.get("folded_into"),
            d.get("over"),
            d.get("second"),
        )


_KINDS = {"kernel": KernelStep, "host": HostStep, "finalize": FinalizeStep}


@dataclass(frozen=True)
class Link:
    source: str  # producer step
    to: str  # consumer step
    tensor: str


@dataclass(frozen=True)
class Manifest:
    """A build's calling contract, as read from ``manifest.json`` (see the module docstring).
    ``dims`` holds the sizes the build was made at (None for the dynamic dim); a re-sized
    manifest (:meth:`with_dims`) is the same build at other static dims."""

    name: str
    digest: str
    spec_file: str
    created: str
    versions: MappingProxyType
    config: MappingProxyType  # the fallback config key
    configs: tuple  # every candidate config key, the fallback first
    library: str | None
    dims: MappingProxyType
    inputs: tuple  # tuple[Tensor, ...]
    outputs: tuple
    tensors: MappingProxyType  # name -> Tensor (every chain tensor)
    steps: tuple
    backward_steps: tuple
    grads_in: tuple
    backward_outputs: tuple
    links: tuple = ()
    format: int = FORMAT_VERSION

    @property
    def all_steps(self) -> tuple:
        return self.steps + self.backward_steps

    def kernel_steps(self) -> list[KernelStep]:
        return [s for s in self.all_steps if s.kind == "kernel"]

    @property
    def dynamic(self) -> str | None:
        """The dynamic dim's name (a manifest has at most one), or None."""
        return dynamic_dim(self.dims)

    @property
    def static(self) -> dict:
        """The static dims and their sizes."""
        return {k: v for k, v in self.dims.items() if v is not None}

    @property
    def has_backward(self) -> bool:
        return bool(self.backward_steps) and bool(self.grads_in)

    def with_dims(self, dims: dict, steps=None, backward_steps=None) -> Manifest:
        """The same build at other dims (shapes are expressions over them), optionally with
        other steps (variants a primitive refuses at those dims left out)."""
        return replace(
            self,
            dims=_frozen(dims),
            steps=self.steps if steps is None else tuple(steps),
            backward_steps=self.backward_steps if backward_steps is None else tuple(backward_steps),
        )

    @classmethod
    def from_data(cls, data: dict, where: str = MANIFEST) -> Manifest:
        """Read a manifest's JSON data (or one made in memory, whose shapes may still be
        ``coda_spec.dims.Sym``); :class:`ManifestError` names what is wrong."""
        if data.get("format") not in READABLE_FORMATS:
            raise ManifestError(
                f"{where}: manifest format {data.get('format')} is not one of "
                f"{', '.join(map(str, READABLE_FORMATS))}; rebuild with this coda"
            )
        try:
            return cls._read(with_exprs(data), where)  # an in-memory manifest may hold Syms
        except ManifestError:
            raise
        except (KeyError, TypeError, IndexError, AttributeError) as e:
            raise ManifestError(
                f"{where}: not a complete format-{FORMAT_VERSION} manifest ({type(e).__name__}: "
                f"{e}); rebuild with this coda"
            ) from e

    @classmethod
    def _read(cls, d: dict, where: str) -> Manifest:
        def steps(key):
            out = []
            for s in d.get(key, ()):
                kind = _KINDS.get(s["kind"])
                if kind is None:
                    raise ManifestError(f"{where}: step '{s.get('name')}' has kind {s['kind']!r}")
                out.append(kind.from_data(s, where))
            return tuple(out)

        tensors = lambda key: tuple(Tensor.from_data(t) for t in d.get(key, ()))  # noqa: E731
        return cls(
            name=d["name"],
            digest=d.get("digest", ""),
            spec_file=d.get("spec_file", "spec"),
            created=d.get("created", ""),
            versions=_frozen(d.get("versions", {})),
            config=_frozen(d["config"]),
            configs=tuple(_frozen(c) for c in d.get("configs") or [d["config"]]),
            library=d.get("library"),
            dims=_frozen(d["dims"]),
            inputs=tensors("inputs"),
            outputs=tensors("outputs"),
            tensors=_frozen({n: Tensor.from_data(t, n) for n, t in d["tensors"].items()}),
            steps=steps("steps"),
            backward_steps=steps("backward_steps"),
            grads_in=tensors("grads_in"),
            backward_outputs=tensors("backward_outputs"),
            links=tuple(Link(x["from"], x["to"], x["tensor"]) for x in d.get("links", ())),
            format=d["format"],
        )


def with_exprs(manifest: dict) -> dict:
    """A copy of ``manifest`` as it is written: every shape entry (:data:`SHAPES`) that is a
    ``coda_spec.dims.Sym`` as its expression, any other Sym as its plain int."""
    return exprs(manifest, SHAPES)


def write_manifest(directory: Path, manifest: dict) -> None:
    """Write atomically; the manifest's presence marks a build complete. A shape still held as
    a ``Sym`` is written as its expression (:func:`with_exprs`)."""
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(with_exprs(manifest), indent=1) + "\n")
    os.replace(tmp, directory / MANIFEST)


def read_manifest(directory) -> Manifest:
    """The build's manifest, read once into :class:`Manifest`. FileNotFoundError: not a
    complete build; :class:`ManifestError` (a ValueError): another format, or malformed."""
    path = Path(directory) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"{directory}: no {MANIFEST}; not a complete coda build (run coda build first)"
        ) from e
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}: not JSON ({e}); rebuild with this coda") from e
    return Manifest.from_data(data, str(path))


def shape_fn(shape):
    """A manifest shape (a list of expressions: ints, dim names, ``2*F``, ``D/2``,
    ``cdiv(D,256)``) compiled once: a function of ``sizes`` (every dim it names, the dynamic
    one included) giving the concrete sizes (``coda_spec.dims.evaluator``)."""
    fns = tuple(evaluator(d) for d in shape)
    return lambda sizes: tuple(f(sizes) for f in fns)


def eval_shape(shape, sizes: dict) -> tuple:
    """Concrete sizes of a manifest shape expression."""
    return shape_fn(shape)(sizes)


def gemm_extents(step: KernelStep, shape) -> tuple[int, int, int]:
    """(M, N, K) of a kernel step's GEMM ``acc = a' @ b'``; ``shape(tensor)`` gives a chain
    tensor's concrete shape (at the call's sizes)."""
    a, b = shape(step.a.tensor), shape(step.b.tensor)
    a, b = (a[::-1] if step.a.transposed else a), (b[::-1] if step.b.transposed else b)
    return a[0], b[1], a[1]
