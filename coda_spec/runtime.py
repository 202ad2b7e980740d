"""Load a built chain and call it with torch CUDA tensors. Imports no compiler and no front end.

    chain = coda_spec.load("build/rmsnorm_chain-latest")
    out = chain(y=y, w_o=w_o, x=x, gamma=gamma, w_up=w_up)   # {"x1": ..., "r": ..., "out": ...}

Layer map: this module reads ``manifest.json`` (``coda_spec.artifact``; format 6 only: every
shape an expression over the spec's dims, evaluated here at the manifest's ``dims`` and the
dynamic dim the inputs bind), launches the exported GEMM kernels through TVM-FFI and the
host/finalize cubins through the driver (``coda_spec.launch``). It imports neither cutlass,
quack, Triton, yaml, jsonschema, the spec front end, the lowering, the primitive registry nor
the reference interpreter (a test checks it); ``Chain.checked()`` loads the spec for verify,
bench and tune, never for a call. docs/runtime.md is the user's guide.

The launch plan, prepared at load: each kernel step's variants, the shape expressions compiled
to functions, the cubins of host steps and finalizes, the NVTX range names, the saved tensors of
the backward, the tune table's picks. At the first launch on a device: the library and the
exported symbols, the SM count and the architecture check (sm_90 only).

What a call does:

1. validates every input before any launch (``check=True``): present (inputs the manifest marks
   ``required: false`` -- read only by ``derive`` or ``equivalent_to``, by no step -- may be
   left out; passed anyway, they are ignored, not validated), a dense CUDA tensor on the current
   device, the declared dtype and shape (static dims exact, dynamic dims consistent), row-major
   contiguous, 16-byte aligned; an unknown keyword is an error too. With ``grads`` the incoming
   gradients are validated the same way, also before any launch. A signature (dtype, device,
   shape and strides of every tensor) is checked in full once; later calls with it check only
   types and alignment. ``check=False`` skips validation: the dynamic dim is read off the input
   that carries it (the M = 0 guard holds);
2. runs the steps in order, each inside an NVTX range (and a ``torch.profiler`` range while the
   profiler records) named ``<chain>/<step> (<spec file>:<line>)``: each kernel gets its
   operands as views (Linear weights as (N, K), per-row vectors as (1, M), per-column vectors as
   (1, N)), freshly allocated outputs and partial buffers (fp32, sized from the chosen variant's
   tile config), and ``max_active_clusters = SMs // cluster size``; finalize steps and host
   steps launch their compiled kernels (one launch each; a finalize folded into the host kernel
   before it launches nothing; there is no torch fallback: a build without them is refused at
   load). All per-call state lives in a ``_Call``, never on the chain;
3. returns the declared outputs. ``add_to`` outputs are written IN PLACE into the tensor they
   accumulate into (that is the point of QuACK's add_to_output), which is returned under the
   output's name. :meth:`Chain.backward` runs the backward steps alone on a forward's saved
   tensors.

Refusals. Every refused call raises :class:`CodaRuntimeError` (a missing CUDA device, a GPU that
is not sm_90, a bad input or gradient, an artifact that cannot be loaded) before the first
launch, so a refused call changes nothing, ``add_to`` tensors included. The one exception would
be a kernel whose compiled argument check rejects what this validation passed (a coda bug); that
is re-raised as a ``CodaRuntimeError`` naming the kernel, and earlier steps of that call have
run.

Empty calls: a dynamic dim bound to 0 (M = 0 rows). The call is valid. A kernel whose GEMM has
an empty M or N is not launched (QuACK's scheduler cannot take an empty grid); its outputs and
partial buffers have that empty extent and are only allocated. A GEMM with only K = 0 (a weight
gradient over zero rows) writes zeros without a launch when its epilogue stores ``acc`` alone
(``acc_only``), else runs its epilogue on zero operands of K = 8 (``acc`` is exactly 0). A host
kernel over zero rows has an empty grid. So at M = 0:

* forward outputs and every per-row tensor are empty, of the right shape ((0, N), (0,));
* gradients of weights and of row vectors (``dw_o``, ``dgamma``) have their full shape and are
  zero: a sum over zero rows is 0;
* ``add_to`` outputs are the tensor they accumulate into, unchanged (and returned as it).

A reduction over nothing (an empty M axis) has one value everywhere: in the finalize kernels,
host steps and the reference interpreter (``coda_spec.reference``, so verify could compare at
M = 0). ``sum`` is 0 (torch's value) and ``mean`` is 0 (torch gives 0/0 = NaN; here a mean over
nothing is 0, so ``rsqrt_mean`` is ``rsqrt(eps)``); ``max`` and ``absmax`` are -inf (max's
identity; torch's amax refuses an empty axis) and ``logsumexp`` is -inf (torch's value).
Per-row statistics over zero rows are simply empty.

Variants. A kernel step may hold several compiled variants of one epilogue, each at another
tile config (``variants``; ``variants[0]`` is the fallback and repeats the step's own values).
Per call and per kernel step the runtime picks one:

* forced: :meth:`Chain.with_variants` (verify, tune and bench run a named variant);
* else tuned: the tune table's entry (``coda_spec.tune``: ``tuned=`` of :func:`load`, else
  ``$CODA_TUNED``, else ``./tuned/*.json``) for this build (keyed by the build directory's name,
  ``<name>-<hash>``, so a rebuild of the same spec keeps its tuning), this kernel and this shape:
  the entry's static dims equal the chain's, its config is one of the step's variants, and of
  those the smallest ``m_max >= M`` wins, else the largest ``m_max``;
* else ``variants[0]``.

The table is read and filtered to this build and these static dims once, at load (a malformed
file is a ValueError naming it); what is left per call is a short list scan. The GPU check
happens at the first launch: a build entry measured on another GPU (its ``gpu`` is not
``torch.cuda.get_device_name()``) is not used, with a warning naming both. The launch then uses
the variant's ``symbol``, ``fields`` (its partial-buffer shapes), ``field_order``, ``majors``,
``max_swizzle_size`` and ``max_active_clusters = SMs // (its cluster_m * cluster_n)``.

Library lookup (``libcute_dsl_runtime.so``, needed by every exported kernel): the file named by
``$CODA_CUTE_DSL_RUNTIME``, then the build directory, then the installed ``nvidia-cutlass-dsl``
(found without importing it), then ``$LD_LIBRARY_PATH``. It is preloaded with RTLD_GLOBAL.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import math
import os
import warnings
import weakref
from pathlib import Path

import torch

from coda_spec import dims as dimmod
from coda_spec.artifact import input_required, read_manifest, shape_fn
from coda_spec.config import config_text
from coda_spec.dtypes import TORCH_DTYPES
from coda_spec.launch import Cubin, LaunchError
from coda_spec.tune_table import load_table

LIB = "libcute_dsl_runtime.so"
LIB_ENV = "CODA_CUTE_DSL_RUNTIME"
SPLIT_K = ("split_k_semaphore", "split_k_workspace")
PARTIAL_ROLES = ("colred", "rowred", "group_out")
INPUT_ROLES = ("tile", "index", "row", "col", "scalar", "group_stat")  # fields a kernel reads
SIGNATURES_KEPT = 64  # input signatures remembered per chain (validated once each)
TABLES_KEPT = 8  # RoPE tables kept before those of dead tensors are dropped
_NVTX = torch._C._nvtx if hasattr(torch._C, "_nvtx") else None  # absent from CPU builds
ZERO_K = 8  # the K of the zero operands an empty-K GEMM runs on (16 bytes of bf16)


def step_variants(manifest: dict, step: dict) -> list[dict]:
    """A kernel step's variants (``variants[0]`` is the fallback)."""
    if not step.get("variants"):
        raise CodaRuntimeError(
            f"{manifest.get('name')}: kernel step '{step.get('name')}' has no variants; "
            "rebuild the spec with this coda"
        )
    return list(step["variants"])


def variant_name(variant: dict) -> str:
    """A variant's name: its config in ``--config`` syntax (``128x128,cluster=2x1,pingpong``)."""
    return config_text(variant["config"])


def _pick(rows: tuple, m: int) -> int:
    """The variant of the entry with the smallest ``m_max >= m``, else of the largest m_max.
    ``rows``: ((m_max, variant index), ...) sorted by m_max."""
    for m_max, index in rows:
        if m_max >= m:
            return index
    return rows[-1][1]


class CodaRuntimeError(RuntimeError):
    """A call was refused before launch (bad input) or the artifact cannot be used."""


def find_runtime_library(build_dir: Path | None = None) -> Path:
    candidates = []
    if os.environ.get(LIB_ENV):
        candidates.append(Path(os.environ[LIB_ENV]))
    if build_dir is not None:
        candidates.append(Path(build_dir) / LIB)
    spec = importlib.util.find_spec("nvidia_cutlass_dsl")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            candidates.append(Path(loc) / "cu12" / "lib" / LIB)
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if d:
            candidates.append(Path(d) / LIB)
    for c in candidates:
        if c.is_file():
            return c
    raise CodaRuntimeError(
        f"cannot find {LIB}; set {LIB_ENV}=/path/to/{LIB} (tried: "
        + ", ".join(map(str, candidates))
        + ")"
    )


def _load_library(build_dir: Path):
    ctypes.CDLL(str(find_runtime_library(build_dir)), mode=ctypes.RTLD_GLOBAL)
    import tvm_ffi

    return tvm_ffi


def _turns_table(freqs: torch.Tensor) -> torch.Tensor:
    """Per-pair frequencies -> QuACK's float-float table of freq/2pi (hi, lo) per pair."""
    turns = freqs.double() / (2 * math.pi)
    hi = turns.float()
    lo = (turns - hi.double()).float()
    return torch.stack([hi, lo], dim=-1).reshape(1, -1)


def _current_device() -> torch.device:
    """The CUDA device kernels run on: torch's current one. (CPU tests patch this function to
    exercise validation and the no-launch paths without a GPU.)"""
    if not torch.cuda.is_available():
        raise CodaRuntimeError(
            "no CUDA device: built kernels run on an sm_90a GPU (H100/H200); "
            "torch.cuda.is_available() is False"
        )
    return torch.device("cuda", torch.cuda.current_device())


def _device_name(device) -> str:
    """The GPU's name, as tune files record it. (A seam: CPU tests patch it; a CPU device, which
    only those tests run on, is called "cpu".)"""
    if device.type != "cuda":
        return "cpu"
    return torch.cuda.get_device_name(device)


def _dense_strides(shape) -> tuple:
    """Row-major strides as torch.empty gives them (a size-0 or size-1 dim counts as 1)."""
    out, step = [], 1
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(out))


def _canonical(x: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor with its row-major strides: torch calls a tensor contiguous whatever
    the stride of a size-1 (or any, when empty) dim is, e.g. ``torch.empty(D, 1).T`` has
    strides (1, 1); a TMA descriptor must not see those. Same memory, same values."""
    want = _dense_strides(x.shape)
    return x if tuple(x.stride()) == want else x.as_strided(x.shape, want)


class _Call:
    """What one call owns: its device and stream, dim sizes, tensors and the poison flag. Made
    per call and passed down, never stored on the chain (two threads, or a verify run
    interleaved with a training call, cannot see each other's state)."""

    __slots__ = ("device", "stream", "sizes", "env", "poison", "nvtx")

    def __init__(self, device, sizes: dict, env: dict, poison: bool = False):
        self.device, self.sizes, self.env, self.poison = device, sizes, env, poison
        cuda = device.type == "cuda"
        self.stream = torch._C._cuda_getCurrentRawStream(device.index) if cuda else 0
        self.nvtx = cuda and _NVTX is not None


class Chain:
    """A loaded build. Call it with the chain's inputs as keyword tensors.

    ``tuned``: where the variant picks come from (see the module docstring): a tune file or a
    directory of them, a tune file's data, a ``coda_spec.tune_table.TuneTable``, None (the default
    search path) or False (none: every kernel runs ``variants[0]``)."""

    def __init__(self, directory, manifest: dict | None = None, tuned=None):
        self.directory = Path(directory).resolve()
        self.manifest = manifest if manifest is not None else read_manifest(self.directory)
        self.name = self.manifest["name"]
        self._module = None
        self._checked = None
        self._fns: dict = {}  # symbol -> exported function, resolved at its first launch
        self._gpus: dict = {}  # device -> SM count, once the GPU is checked (sm_90)
        self._signatures: dict = {}  # input signature -> dim sizes (validated once)
        # id of a RoPE frequency tensor -> (weak reference to it, its version, turns table)
        self._tables: dict = {}
        m = self.manifest
        self._forward = list(m["steps"])
        self._backward = list(m.get("backward_steps", []))
        kernels = [s for s in self._forward + self._backward if s["kind"] == "kernel"]
        self._variants = {s["name"]: step_variants(m, s) for s in kernels}
        self._names = {k: [variant_name(v) for v in vs] for k, vs in self._variants.items()}
        dynamic = [k for k, v in m["dims"].items() if v is None]
        self._dynamic = dynamic[0] if dynamic else None
        self._static = {k: v for k, v in m["dims"].items() if v is not None}
        self._declared = {t["name"]: t for t in m["inputs"]}
        self._required = {n: t for n, t in self._declared.items() if input_required(t)}
        self._grads_in = {t["name"]: t for t in m.get("grads_in", [])}
        self._folded = {  # name -> declared shape folded (static ints, the dynamic dim's name)
            t["name"]: [dimmod.fold(d, m["dims"]) for d in t["shape"]]
            for t in list(m["inputs"]) + list(m.get("grads_in", []))
        }
        self._dyn_at = self._dynamic_source()
        self._shapes = {n: shape_fn(t["shape"]) for n, t in m["tensors"].items()}
        self._field_shapes = {
            id(f): shape_fn(f["shape"])
            for vs in self._variants.values()
            for v in vs
            for f in v["fields"]
        }
        self._cubins = {  # step -> (cubin, aligned cubin or None)
            s["name"]: _cubins(self.directory, s["launch"])
            for s in self._forward + self._backward
            if s.get("launch")
        }
        self._check_compiled()
        self._ranges = {
            s["name"]: f"{self.name}/{s['name']} ({m.get('spec_file', 'spec')}:{s.get('line')})"
            for s in self._forward + self._backward
        }
        self._saved = self._saved_names()
        self._forced: dict = {}  # step -> variant index (with_variants)
        self._table = load_table(tuned)
        self._tuned = self._tuned_rows()
        self._picks: dict | None = None  # {step: rows} once the GPU is checked (first launch)

    def _check_compiled(self) -> None:
        """Every host step and finalize has its compiled kernel (or, a finalize, the host kernel
        that computes it): a call never falls back to torch."""
        for s in self._forward + self._backward:
            if s["kind"] == "kernel" or s["name"] in self._cubins or s.get("folded_into"):
                continue
            raise CodaRuntimeError(
                f"{self.name}: {s['kind']} step '{s['name']}' has no compiled kernel in "
                f"{self.directory}; rebuild the spec with this coda"
            )

    def _dynamic_source(self):
        """(input, axis) that binds the dynamic dim on the unchecked path."""
        for name in self._required:
            for axis, d in enumerate(self._folded[name]):
                if d == self._dynamic:
                    return name, axis
        return None

    def _saved_names(self) -> list[str]:
        """Forward tensors the backward section reads (its ``save``), in first-read order."""
        grads = set(self._grads_in)
        made: set = set()
        out: list = []

        def read(t):
            if t and t not in made and t not in grads and t not in out:
                out.append(t)

        for s in self._backward:
            if s["kind"] == "kernel":
                read(s["a"][0])
                read(s["b"][0])
                read(s["c"][0] if s["c"] else None)
                read(s["add_to"])
                for f in s["fields"]:
                    if f["role"] in INPUT_ROLES:
                        read(f["tensor"])
                made.update(f["tensor"] for f in s["fields"] if f["role"] not in INPUT_ROLES)
                if s["d"]:
                    made.add(s["d"][0])
            elif s["kind"] == "host":
                for t in s["reads"]:
                    read(t)
                made.update(s["writes"])
            else:
                read(s["of"])
                made.add(s["result"])
        return out

    def with_manifest(self, manifest: dict) -> Chain:
        """The same library under another manifest (verify's re-sized shapes), with the same
        tune table; forced variants carry over where the new manifest has them (by name)."""
        other = Chain(self.directory, manifest, tuned=self._table)
        other._module, other._checked, other._fns = self._module, self._checked, self._fns
        other._gpus, other._cubins = self._gpus, self._cubins
        for step, i in self._forced.items():
            name = self._names[step][i]
            if name in other._names.get(step, ()):
                other._forced[step] = other._names[step].index(name)
        return other

    # -- variants ----------------------------------------------------------------------------
    def variant_names(self, step: str) -> list[str]:
        """A kernel step's variants by name (config text), the fallback first."""
        if step not in self._names:
            raise ValueError(
                f"{self.name}: no kernel step '{step}' (kernel steps: {', '.join(self._names)})"
            )
        return list(self._names[step])

    def with_variants(self, choice: dict) -> Chain:
        """A chain that always runs the given variants: ``{step: index or name}`` (a name is a
        config text, see :meth:`variant_names`); other kernels keep this chain's rule."""
        forced = dict(self._forced)
        for step, v in choice.items():
            names = self.variant_names(step)
            if isinstance(v, str):
                if v not in names:
                    raise ValueError(
                        f"{self.name}: kernel '{step}' has no variant {v!r} (it has "
                        f"{', '.join(names)})"
                    )
                forced[step] = names.index(v)
            elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(names):
                forced[step] = v
            else:
                raise ValueError(
                    f"{self.name}: kernel '{step}' has {len(names)} variant(s); {v!r} is not "
                    "one of their indices or names"
                )
        other = self.with_manifest(self.manifest)
        other._forced = forced
        return other

    def selected_variants(self, sizes: dict) -> dict:
        """The variant name each kernel step runs at ``sizes`` (forced, tuned, else the
        fallback), without running anything. Checks the tune table's GPU like a call does."""
        return {
            s["name"]: variant_name(self._variant(s, sizes, None))
            for s in self._forward + self._backward
            if s["kind"] == "kernel"
        }

    def _tuned_rows(self) -> list:
        """[(path, gpu, {step: ((m_max, variant index), ...)})]: the tune table's entries for
        this build at this chain's static dims whose config is one of the step's variants."""
        out = []
        for path, entry in self._table.builds(self.directory.name):
            rows = {}
            for step, entries in entry["kernels"].items():
                names = self._names.get(step)
                if not names or len(names) < 2:
                    continue
                got: dict = {}
                for e in entries:
                    if e["dims"] == self._static and e["config"] in names:
                        got.setdefault(e["m_max"], names.index(e["config"]))
                if got:
                    rows[step] = tuple(sorted(got.items()))
            if rows:
                out.append((path, entry["gpu"], rows))
        return out

    def _tuned_picks(self, device) -> dict:
        """{step: rows} usable on this GPU; decided once, at the first launch."""
        if self._picks is None:
            picks: dict = {}
            if self._tuned:
                gpu = _device_name(device if device is not None else _current_device())
                for _, measured_on, rows in self._tuned:
                    if measured_on == gpu:
                        for step, r in rows.items():
                            picks.setdefault(step, r)
                if not picks:
                    files = ", ".join(sorted({p for p, _, _ in self._tuned}))
                    other = ", ".join(sorted({g for _, g, _ in self._tuned}))
                    warnings.warn(
                        f"{self.name}: tune file(s) {files} were measured on {other}, not on "
                        f"this {gpu}; not used (every kernel runs its fallback variant; run "
                        "coda tune on this GPU)",
                        stacklevel=5,
                    )
            self._picks = picks
        return self._picks

    def _variant(self, step: dict, sizes: dict, device=None) -> dict:
        """The variant a kernel step runs at ``sizes``: forced, else tuned, else variants[0]."""
        name = step["name"]
        variants = self._variants[name]
        index = self._forced.get(name)
        if index is None:
            index = 0
            if len(variants) > 1 and self._tuned:
                rows = self._tuned_picks(device).get(name)
                if rows:
                    index = _pick(rows, int(sizes.get(self._dynamic, 0)))
        return variants[index]

    @property
    def required_inputs(self) -> list[str]:
        """Inputs a call must pass: those some step reads."""
        return list(self._required)

    @property
    def saved(self) -> list[str]:
        """The forward tensors :meth:`backward` needs (the spec's ``backward.save`` as read)."""
        return list(self._saved)

    # -- validation --------------------------------------------------------------------------
    def bind(self, inputs: dict) -> dict:
        """Validate inputs; return the dim sizes they imply."""
        return self._validate(inputs, None)[2]

    def _validate(self, inputs: dict, grads: dict | None) -> tuple:
        """Everything a call checks, before any launch: returns (device, env, sizes), env
        holding the required inputs (and gradients) as validated, canonically strided
        tensors."""
        unknown = inputs.keys() - self._declared.keys()
        if unknown:
            raise CodaRuntimeError(
                f"{self.name}: unknown input(s) {sorted(unknown)}; expected "
                f"{sorted(self._declared)}"
            )
        missing = [n for n in self._required if n not in inputs]
        if missing:
            raise CodaRuntimeError(f"{self.name}: missing input(s) {missing}")
        device = _current_device()
        tensors = {n: inputs[n] for n in self._required}
        declared = dict(self._required)
        if grads is not None:
            self._check_grad_names(grads)
            tensors.update(grads)
            declared.update({n: dict(t, what="gradient") for n, t in self._grads_in.items()})
        env, sizes = self._checked_tensors(declared, tensors, device)
        return device, env, sizes

    def _check_grad_names(self, grads: dict) -> None:
        """The incoming gradients are exactly the backward section's ``grads_in``."""
        if not self._backward:
            raise CodaRuntimeError(f"{self.name}: the chain has no backward section")
        missing = [n for n in self._grads_in if n not in grads]
        unknown = set(grads) - set(self._grads_in)
        if missing or unknown:
            raise CodaRuntimeError(
                f"{self.name}: backward needs gradients {sorted(self._grads_in)}; missing "
                f"{missing}, unknown {sorted(unknown)}"
            )

    def _checked_tensors(self, declared: dict, tensors: dict, device) -> tuple[dict, dict]:
        """Validate ``tensors`` against ``declared`` (name -> manifest entry): a signature seen
        before (dtype, device, shape, strides of every tensor) skips straight to the per-call
        checks (type, alignment); a new one is checked in full and remembered."""
        try:
            key = tuple(
                (n, x.dtype, x.get_device(), x.shape, x.stride()) for n, x in tensors.items()
            )
        except (AttributeError, RuntimeError):
            key = None  # not a tensor, or not strided: the full check names it
        seen = self._signatures.get(key) if key is not None else None
        if seen is None:
            sizes = dict(self._static)
            for name, t in declared.items():
                self._check_one(name, t, tensors[name], sizes, device)
            recanon = frozenset(
                n for n, x in tensors.items() if tuple(x.stride()) != _dense_strides(x.shape)
            )
            if key is not None:
                if len(self._signatures) >= SIGNATURES_KEPT:
                    self._signatures.pop(next(iter(self._signatures)))
                self._signatures[key] = (dict(sizes), recanon)
        else:
            sizes, recanon = dict(seen[0]), seen[1]
        env = {}
        for name, x in tensors.items():
            if x.data_ptr() & 15:
                what = declared[name].get("what", "input")
                raise CodaRuntimeError(
                    f"{self.name}: {what} '{name}' is not 16-byte aligned (TMA needs it)"
                )
            # DLPack refuses tensors that require grad; kernels write raw memory anyway
            if x.requires_grad:
                x = x.detach()
            env[name] = _canonical(x) if name in recanon else x
        return env, sizes

    def _check_one(self, name: str, t: dict, x, sizes: dict, device) -> None:
        """Device, dtype, shape (binding dynamic dims into ``sizes``), contiguity."""
        shape = self._folded.get(name)
        if shape is None:
            shape = [dimmod.fold(d, self.manifest["dims"]) for d in t["shape"]]
        where = f"{self.name}: {t.get('what', 'input')} '{name}'"
        if not isinstance(x, torch.Tensor):
            raise CodaRuntimeError(f"{where} is {type(x).__name__}, not a torch.Tensor")
        if x.layout != torch.strided:
            raise CodaRuntimeError(f"{where} is a {x.layout} tensor; kernels take dense ones")
        if x.device != device:
            raise CodaRuntimeError(f"{where} is on {x.device}; kernels run on {device}")
        if x.dtype != TORCH_DTYPES[t["dtype"]]:
            raise CodaRuntimeError(f"{where} is {x.dtype}; expected {t['dtype']}")
        if x.dim() != len(shape):
            raise CodaRuntimeError(f"{where} has shape {tuple(x.shape)}; expected {t['shape']}")
        for axis, (want, got) in enumerate(zip(shape, x.shape, strict=True)):
            if isinstance(want, int) and want != got:
                raise CodaRuntimeError(f"{where} dim {axis} is {got}; expected {want}")
            if isinstance(want, str):
                if sizes.setdefault(want, int(got)) != got:
                    raise CodaRuntimeError(
                        f"{where} dim {axis} is {got} but {want} is {sizes[want]} elsewhere"
                    )
        if not x.is_contiguous():
            raise CodaRuntimeError(
                f"{where} is not contiguous (strides {x.stride()}); call .contiguous()"
            )

    def _unchecked(self, tensors: dict) -> tuple:
        """``check=False``: no validation; the dynamic dim is read off the input that carries
        it (so an M = 0 call still launches nothing); the device is that of the tensors."""
        sizes = dict(self._static)
        if self._dyn_at is not None:
            name, axis = self._dyn_at
            sizes[self._dynamic] = int(tensors[name].shape[axis])
        first = next(iter(tensors.values()), None)
        device = first.device if first is not None else _current_device()
        env = {n: (x.detach() if x.requires_grad else x) for n, x in tensors.items()}
        return device, env, sizes

    # -- planning ----------------------------------------------------------------------------
    def gemm_extents(self, step: dict, sizes: dict) -> tuple[int, int, int]:
        """(M, N, K) of a kernel step's GEMM ``acc = a' @ b'`` at ``sizes``."""
        (a_t, a_tr), (b_t, b_tr) = step["a"], step["b"]
        a, b = self._shape(a_t, sizes), self._shape(b_t, sizes)
        a, b = (a[::-1] if a_tr else a), (b[::-1] if b_tr else b)
        return a[0], b[1], a[1]

    def _shape(self, tensor: str, sizes: dict) -> tuple:
        fn = self._shapes.get(tensor)
        if fn is None:
            fn = self._shapes[tensor] = shape_fn(self.manifest["tensors"][tensor]["shape"])
        return fn(sizes)

    def launches(self, step: dict, sizes: dict) -> bool:
        """Whether a kernel step launches its kernel at ``sizes``: not when its GEMM's M or N is
        empty (nothing to compute), nor when only K is empty and the epilogue stores ``acc``
        alone (the output is all zeros). Only an empty dynamic dim can make a GEMM empty, so a
        non-zero one answers at once."""
        if self._dynamic is not None and sizes.get(self._dynamic):
            return True
        m, n, k = self.gemm_extents(step, sizes)
        if m == 0 or n == 0:
            return False
        return k != 0 or not step.get("acc_only", False)

    def plan(self, sizes: dict, backward: bool = False) -> list[tuple[str, str]]:
        """What a call at ``sizes`` would do, step by step, without doing it: ``(step, what)``
        with what = ``launch``, ``no launch`` (an empty GEMM: outputs allocated, nothing
        computed), ``finalize``, ``folded`` (computed by the host kernel before it) or
        ``host``."""
        sizes = {**self._static, **sizes}
        out = []
        for s in self._forward + (self._backward if backward else []):
            if s["kind"] == "kernel":
                out.append((s["name"], "launch" if self.launches(s, sizes) else "no launch"))
            elif s.get("folded_into"):
                out.append((s["name"], "folded"))
            else:
                out.append((s["name"], s["kind"]))
        return out

    # -- execution ---------------------------------------------------------------------------
    def __call__(self, check: bool = True, **inputs) -> dict:
        env = self.run(inputs, check=check)
        return {o["name"]: env[o["name"]] for o in self.manifest["outputs"]}

    def run(
        self,
        inputs: dict,
        poison: bool = False,
        grads: dict | None = None,
        check: bool = True,
    ) -> dict:
        """Run every forward step — and, with ``grads`` (the incoming gradients named in the
        spec's ``backward.grads``), every backward step — and return every chain tensor
        (required inputs, outputs, intermediates, partial buffers). ``poison`` fills every buffer
        a kernel writes with NaN first, so a verifier can prove each element and partial slot
        was written. Inputs and gradients are all validated before the first step runs;
        ``check=False`` skips that (see the module docstring)."""
        if check:
            device, env, sizes = self._validate(inputs, grads)
        else:
            given = {n: inputs[n] for n in self._required}
            device, env, sizes = self._unchecked({**given, **(grads or {})})
        call = _Call(device, sizes, env, poison)
        # no autograd here: every tensor a call reads is detached, and kernels write raw memory
        self._steps(self._forward + (self._backward if grads is not None else []), call)
        return env

    def backward(self, saved: dict, check: bool = True, **grads) -> dict:
        """Gradients, from the tensors a forward :meth:`run` produced: ``saved`` holds (at
        least) :attr:`saved` -- the env :meth:`run` returned will do -- and ``grads`` the
        incoming gradients. Runs the backward steps only; the forward is not re-run. Returns
        the backward outputs. ``add_to`` gradients accumulate IN PLACE into the incoming
        gradient they name (documented per spec; see docs/runtime.md)."""
        if not self._backward:
            raise CodaRuntimeError(f"{self.name}: the chain has no backward section")
        missing = [n for n in self._saved if n not in saved]
        if missing:
            raise CodaRuntimeError(
                f"{self.name}: backward needs the saved forward tensors {self._saved}; "
                f"missing {missing}"
            )
        tensors = {n: saved[n] for n in self._saved}
        if check:
            self._check_grad_names(grads)
            declared = {
                n: {**self.manifest["tensors"][n], "what": "saved tensor"} for n in self._saved
            }
            declared.update({n: dict(t, what="gradient") for n, t in self._grads_in.items()})
            device = _current_device()
            env, sizes = self._checked_tensors(declared, {**tensors, **grads}, device)
        else:
            device, env, sizes = self._unchecked({**tensors, **grads})
            if self._dyn_at is None or self._dyn_at[0] not in tensors:
                sizes.update(self._sizes_from(env))
        call = _Call(device, sizes, env)
        self._steps(self._backward, call)
        return {o["name"]: env[o["name"]] for o in self.manifest.get("backward_outputs", [])}

    def _sizes_from(self, env: dict) -> dict:
        """The dynamic dim read off any tensor in ``env`` whose declared shape carries it."""
        for name, x in env.items():
            shape = self.manifest["tensors"].get(name, {}).get("shape", ())
            for axis, d in enumerate(shape):
                if d == self._dynamic:
                    return {d: int(x.shape[axis])}
        return {}

    def steps_fn(self, env: dict, sizes: dict, steps: list[dict]):
        """A callable that runs ``steps`` (manifest step dicts: one kernel, or the backward
        section) on a shallow copy of ``env`` -- the tensors of a finished :meth:`run` -- and
        returns that copy. Each call allocates its outputs afresh, as a real call does; an
        ``add_to`` output accumulates into ``env``'s tensor again. Inputs are not re-validated:
        for timing one kernel or one section alone (``coda bench``), not for users."""
        device = _current_device()

        def call() -> dict:
            work = _Call(device, sizes, dict(env))  # a run's tensors: already detached
            self._steps(steps, work)
            return work.env

        return call

    def _steps(self, steps, call: _Call):
        """Run ``steps`` in order, each inside an NVTX range (nsys) -- and, while torch's
        profiler records, a ``record_function`` range -- named after the step and its line."""
        profiling = torch.autograd._profiler_enabled()
        for step in steps:
            name = self._ranges[step["name"]]
            if call.nvtx:
                _NVTX.rangePushA(name)
            scope = torch.profiler.record_function(name) if profiling else None
            if scope is not None:
                scope.__enter__()
            try:
                kind = step["kind"]
                if kind == "kernel":
                    if self.launches(step, call.sizes):
                        self._kernel(step, call)
                    else:
                        self._no_launch(step, call)
                elif kind == "finalize":
                    self._finalize(step, call)
                else:
                    self._host(step, call)
            finally:
                if scope is not None:
                    scope.__exit__(None, None, None)
                if call.nvtx:
                    _NVTX.rangePop()

    def _fn(self, symbol: str):
        try:
            if self._module is None:
                tvm_ffi = _load_library(self.directory)
                self._module = tvm_ffi.load_module(str(self.directory / self.manifest["library"]))
            return self._module[symbol]
        except CodaRuntimeError:
            raise
        except Exception as e:  # noqa: BLE001 - an unusable artifact is a runtime error
            raise CodaRuntimeError(
                f"{self.name}: cannot load kernel '{symbol}' from "
                f"{self.directory / str(self.manifest.get('library'))}: {e}"
            ) from e

    def _sm_count(self, dev) -> int:
        """The SM count of ``dev``, once its architecture is checked (sm_90 only)."""
        sms = self._gpus.get(dev)
        if sms is None:
            if dev.type == "cuda":
                major, minor = torch.cuda.get_device_capability(dev)
                if (major, minor) != (9, 0):
                    raise CodaRuntimeError(
                        f"{self.name}: this build holds sm_90a kernels (Hopper: H100/H200); "
                        f"{torch.cuda.get_device_name(dev)} is sm_{major}{minor}. Run on a "
                        "Hopper GPU (coda builds for sm_90a only)"
                    )
            sms = torch.cuda.get_device_properties(dev).multi_processor_count
            self._gpus[dev] = sms
        return sms

    def _launchable(self, symbol: str):
        fn = self._fns.get(symbol)
        if fn is None:
            fn = self._fns[symbol] = self._fn(symbol)
        return fn

    def _kernel(self, step, call: _Call):
        env, sizes, dev = call.env, call.sizes, call.device
        mac_total = self._sm_count(dev)
        v = self._variant(step, sizes, dev)
        a, b = self._operands(step, env, v)
        d = None
        if step["d"] is not None:
            name, dtype, _ = step["d"]
            if step["add_to"]:
                d = env[step["add_to"]]
            else:
                d = _alloc(call, self._shape(name, sizes), TORCH_DTYPES[dtype])
        c = env[step["c"][0]] if step["c"] is not None else None
        made, args = {}, {}
        for f in v["fields"]:  # partial buffers sized by this variant's tile
            args[f["name"]] = self._field(f, call, made)
        epi = tuple(None if n in SPLIT_K else args[n] for n in v["field_order"])
        cfg = v["config"]
        mac = mac_total // (cfg["cluster_m"] * cfg["cluster_n"])
        sched = (mac, None, v["max_swizzle_size"], None, None, None)
        fn = self._launchable(v["symbol"])
        try:
            fn(a, b, d, c, epi, sched, None, None, None)
        except Exception as e:  # noqa: BLE001 - the compiled argument check refused
            raise CodaRuntimeError(
                f"{self.name}: kernel '{step['name']}' (variant {variant_name(v)}) refused its "
                f"arguments (a coda runtime bug: its validation passed them; please report): {e}"
            ) from e
        if d is not None:
            env[step["d"][0]] = d
        env.update(made)

    def _operands(self, step, env, v) -> tuple:
        """QuACK's A (M, K) and B (N, K) as views; with K = 0 (a weight gradient over zero
        rows whose epilogue does more than store acc) zero operands of K = 8 (acc = 0 exactly)
        in the majors the variant was compiled for, so the epilogue still runs on the GPU."""
        a_t, a_tr = step["a"]
        b_t, b_tr = step["b"]
        a = env[a_t].T if a_tr else env[a_t]
        b_val = env[b_t].T if b_tr else env[b_t]
        b = b_val.T  # QuACK's B is (N, K)
        if a.shape[1] == 0:
            a = _zero_operand(a.shape[0], v["majors"]["A"], a.dtype, a.device)
            b = _zero_operand(b.shape[0], v["majors"]["B"], b.dtype, b.device)
        for what, x in (("A", a), ("B", b)):
            want = v["majors"][what]
            if ("row" if x.stride(-1) == 1 else "col") != want:
                raise CodaRuntimeError(
                    f"{self.name}: kernel '{step['name']}' operand {what} must be {want}-major"
                )
        return a, b

    def _no_launch(self, step, call: _Call):
        """A kernel step that launches nothing at these sizes: its GEMM's M or N is empty (every
        output and partial buffer has that empty extent: allocated, nothing to compute), or
        only K is empty and the epilogue stores ``acc`` alone (zeros). An ``add_to`` output is
        the tensor it accumulates into, unchanged (adding nothing, or zeros)."""
        env, sizes = call.env, call.sizes
        m, n, _ = self.gemm_extents(step, sizes)
        if step["d"] is not None:
            name, dtype, _ = step["d"]
            if step["add_to"]:
                env[name] = env[step["add_to"]]
            else:
                shape = self._shape(name, sizes)
                env[name] = torch.zeros(shape, dtype=TORCH_DTYPES[dtype], device=call.device)
        if m and n:  # K = 0, acc-only epilogue: no fields
            return
        made: dict = {}
        for f in self._variant(step, sizes, call.device)["fields"]:
            if f["role"] not in INPUT_ROLES:
                self._field(f, call, made)
        env.update(made)

    def _field(self, f, call: _Call, made):
        role, t = f["role"], f["tensor"]
        env = call.env
        if role in ("tile", "index"):
            return env[t]
        if role == "row":
            x = env[t]
            return self._turns(x) if f["transform"] == "turns_table" else x.reshape(1, -1)
        if role == "col":
            x = env[t].reshape(1, -1)
            return x.float() if f["transform"] == "to_fp32" else x
        if role == "scalar":
            x = env[t]
            if x.dtype != torch.float32:
                raise CodaRuntimeError(f"{self.name}: scalar '{t}' must be fp32")
            return x.data_ptr()
        if role == "group_stat":  # a GroupStat's group width: baked in at compile time
            return None
        at = self._field_shapes.get(id(f)) or shape_fn(f["shape"])
        shape = at(call.sizes)
        dtype = TORCH_DTYPES[f["dtype"]]
        if role == "select" and not call.poison:
            buf = torch.zeros(shape, dtype=dtype, device=call.device)  # ignored rows stay 0
        else:
            buf = _alloc(call, shape, dtype)
        made[t] = buf
        return buf

    def _turns(self, freqs: torch.Tensor) -> torch.Tensor:
        """RoPE's turns table of a frequency tensor, computed once per tensor and contents: kept
        while that tensor object lives (a weak reference, never its address: a freed tensor's
        memory is reused by the next one), recomputed when its version counter moves (an
        in-place update)."""
        seen = self._tables.get(id(freqs))
        if seen is not None and seen[0]() is freqs and seen[1] == freqs._version:
            return seen[2]
        table = _turns_table(freqs)
        if len(self._tables) >= TABLES_KEPT:  # forget the tables of tensors that are gone
            for key in [k for k, v in self._tables.items() if v[0]() is None]:
                del self._tables[key]
        self._tables[id(freqs)] = (weakref.ref(freqs), freqs._version, table)
        return table

    def _finalize(self, step, call: _Call):
        """A finalize: its compiled kernel (one launch), or nothing when the host kernel that
        produced the partial computed it (``folded_into``)."""
        if not step.get("folded_into"):
            self._launch(step, self._cubins[step["name"]], call)

    def _host(self, step, call: _Call):
        """A host step: its compiled kernel (one launch; no launch over zero rows)."""
        self._launch(step, self._cubins[step["name"]], call)

    def _launch(self, step, cubin: tuple, call: _Call):
        """Allocate a compiled step's outputs, bind its arguments, launch it."""
        launch, env, sizes = step["launch"], call.env, call.sizes
        for o in launch["outputs"]:
            t = o["tensor"]
            dtype = TORCH_DTYPES[o["dtype"]]
            shape = self._shape(t, sizes)
            if o.get("init") == "zeros" and not call.poison:
                env[t] = torch.zeros(shape, dtype=dtype, device=call.device)
            else:
                env[t] = _alloc(call, shape, dtype)
        align = launch.get("pointer_align", 1)
        args = []
        for a, v in zip(launch["args"], launch_values(launch, env, sizes), strict=True):
            if isinstance(v, torch.Tensor):
                v = v.data_ptr()
                if v % align:
                    raise CodaRuntimeError(
                        f"{self.name}: step '{step['name']}' reads '{a['tensor']}' at an address "
                        f"that is not {align}-byte aligned"
                    )
            args.append(v)
        grid = launch_grid(launch, env, sizes)
        generic, fast = cubin
        if fast is not None:
            want = launch["aligned"]
            if all(args[i] % want["multiple"] == 0 for i in want["params"]):
                generic = fast
        if call.device.type == "cuda":
            self._sm_count(call.device)  # the architecture check
        try:
            generic.launch(call.device.index or 0, call.stream, grid, tuple(args))
        except LaunchError as e:
            raise CodaRuntimeError(f"{self.name}: step '{step['name']}': {e}") from e

    def checked(self):
        """The build's own spec, checked (verify, bench and tune read it; a call never does:
        this imports the front end)."""
        if self._checked is None:
            from coda_spec.frontend import check_source
            from coda_spec.source import parse_text

            text = (self.directory / "spec.yaml").read_text()
            self._checked = check_source(parse_text(self.manifest["spec_file"], text))
        return self._checked


def _dim(expr, sizes: dict, env: dict | None = None) -> int:
    """A launch argument or grid entry: an int, a dim expression (``M``, ``3*D``,
    ``cdiv(M,4)``) or ``{"extent": [tensor, axis], "block": B}`` (cdiv of that axis of that
    tensor as it is now)."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, dict):
        t, axis = expr["extent"]
        return -(-int(env[t].shape[axis]) // int(expr.get("block", 1)))
    return _evaluator(expr)(sizes)


@functools.lru_cache(maxsize=1024)
def _evaluator(expr: str):
    """A dim expression compiled once (``coda_spec.dims.evaluator``, the one evaluator)."""
    return dimmod.evaluator(expr)


def launch_values(launch: dict, env: dict, sizes: dict) -> list:
    """The arguments of a compiled step (a manifest ``launch`` entry) at this call: the chain
    tensor for a ``tensor`` argument (the runtime passes its pointer), an int otherwise."""
    out = []
    for a in launch["args"]:
        if "tensor" in a:
            out.append(env[a["tensor"]])
        elif "dim" in a:
            out.append(_dim(a["dim"], sizes))
        else:
            t, axis = a["extent"]
            out.append(int(env[t].shape[axis]) // a.get("div", 1))
    return out


def launch_grid(launch: dict, env: dict, sizes: dict) -> tuple:
    """The grid of a compiled step at this call."""
    return tuple(_dim(g, sizes, env) for g in launch["grid"])


def _cubins(directory: Path, launch: dict) -> tuple:
    """A compiled step's cubins: (generic, aligned or None); see ``triton_aot``."""
    fast = launch.get("aligned")
    if fast is not None:
        fast = Cubin(directory, {**launch, **fast})
    return Cubin(directory, launch), fast


def _alloc(call: _Call, shape, dtype):
    if call.poison:
        return torch.full(shape, float("nan"), dtype=dtype, device=call.device)
    return torch.empty(shape, dtype=dtype, device=call.device)


def _zero_operand(rows: int, major: str, dtype, device) -> torch.Tensor:
    """A (rows, 8) zero operand, K-contiguous ("row") or rows-contiguous ("col")."""
    if major == "row":
        return torch.zeros(rows, ZERO_K, dtype=dtype, device=device)
    return torch.zeros(ZERO_K, rows, dtype=dtype, device=device).T


def load(directory, tuned=None) -> Chain:
    """Load a build directory (``build/<name>-<hash>`` or ``build/<name>-latest``). ``tuned``:
    the tune table to pick variants from (a file or directory path, a loaded table, False for
    none); None: ``$CODA_TUNED``, else ``./tuned/*.json`` (see ``coda_spec.tune``)."""
    return Chain(directory, tuned=tuned)
