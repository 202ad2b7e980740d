"""Load a built chain and call it with torch CUDA tensors. Imports neither cutlass nor quack.

    chain = coda_spec.load("build/rmsnorm_chain-latest")
    out = chain(y=y, w_o=w_o, x=x, gamma=gamma, w_up=w_up)   # {"x1": ..., "r": ..., "out": ...}

What a call does, from ``manifest.json`` alone (see ``coda_spec.artifact``):

1. validates every input before any launch: present (inputs the manifest marks
   ``required: false`` -- read only by ``derive`` or ``equivalent_to``, by no step -- may be
   left out; passed anyway, they are ignored, not validated), a dense CUDA tensor on the current
   device, the declared dtype and shape (static dims exact, dynamic dims consistent), row-major
   contiguous, 16-byte aligned; an unknown keyword is an error too. With ``grads`` the incoming
   gradients are validated the same way, also before any launch;
2. runs the steps in order: each kernel gets its operands as views (Linear weights as (N, K),
   per-row vectors as (1, M), per-column vectors as (1, N)), freshly allocated outputs and
   partial buffers (fp32, sized from the chosen variant's tile config), and
   ``max_active_clusters = SMs // cluster size``; finalize steps fold partials in torch (along
   the tile axis, whatever its width); host steps run the spec's reference math in torch;
3. returns the declared outputs. ``add_to`` outputs are written IN PLACE into the tensor they
   accumulate into (that is the point of QuACK's add_to_output), which is returned under the
   output's name.

Refusals. Every refused call raises :class:`CodaRuntimeError` (a missing CUDA device, a bad
input or gradient, an artifact that cannot be loaded) before the first launch, so a refused call
changes nothing, ``add_to`` tensors included. The one exception would be a kernel whose compiled
argument check rejects what this validation passed (a coda bug); that is re-raised as a
``CodaRuntimeError`` naming the kernel, and earlier steps of that call have run.

Empty calls: a dynamic dim bound to 0 (M = 0 rows). The call is valid and launches no kernel
whose GEMM has an empty extent (M, N or K = 0; QuACK's scheduler cannot take an empty grid; at
M = 0 that is every kernel of the bundled chains). Such a kernel's epilogue runs in torch instead
(the reference interpreter in fp32, as for host steps) on ``acc = a @ b``, which is empty, or all
zeros where only K = 0 (a weight gradient summed over zero rows). So at M = 0:

* forward outputs and every per-row tensor are empty, of the right shape ((0, N), (0,));
* gradients of weights and of row vectors (``dw_o``, ``dgamma``) have their full shape and are
  zero: a sum over zero rows is 0;
* ``add_to`` outputs are the tensor they accumulate into, unchanged (and returned as it).

A reduction over nothing (an empty M axis) has one value everywhere: in finalize steps, host
steps and the reference interpreter (``coda_spec.reference``, so verify could compare at M = 0).
``sum`` is 0 (torch's value) and ``mean`` is 0 (torch gives 0/0 = NaN; here a mean over nothing
is 0, so ``rsqrt_mean`` is ``rsqrt(eps)``); ``max`` and ``absmax`` are -inf (max's identity;
torch's amax refuses an empty axis) and ``logsumexp`` is -inf (torch's value). Per-row
statistics over zero rows are simply empty.

Variants (manifest format 4). A kernel step may hold several compiled variants of one
epilogue, each at another tile config (``variants``; ``variants[0]`` is the fallback and repeats
the step's own values; a format-2/3 step is one variant at the manifest's ``config``). Per call
and per kernel step the runtime picks one:

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
import importlib.util
import math
import os
import warnings
from pathlib import Path

import torch

from coda_spec import dims as dimmod
from coda_spec.artifact import eval_shape, gemm_extents, input_required, read_manifest
from coda_spec.config import config_text
from coda_spec.finalize import mean_of
from coda_spec.reference import TORCH_DTYPES
from coda_spec.tune import load_table

LIB = "libcute_dsl_runtime.so"
LIB_ENV = "CODA_CUTE_DSL_RUNTIME"
SPLIT_K = ("split_k_semaphore", "split_k_workspace")
PARTIAL_ROLES = ("colred", "rowred", "group_out")
EMPTY_FOLD = {"sum": 0.0, "max": float("-inf"), "logsumexp": float("-inf")}  # over nothing
# what a variant holds (format 4), read from a format-2/3 kernel step's own values
VARIANT_KEYS = (
    "symbol",
    "fields",
    "field_order",
    "majors",
    "max_swizzle_size",
    "compile_s",
    "object_bytes",
)


def step_variants(manifest: dict, step: dict) -> list[dict]:
    """A kernel step's variants: format 4's ``variants``; a format-2/3 step (no ``variants``) is
    one variant made of its own values at the manifest's ``config``."""
    if step.get("variants"):
        return list(step["variants"])
    return [{"config": manifest["config"], **{k: step[k] for k in VARIANT_KEYS if k in step}}]


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


def _dense(x: torch.Tensor) -> torch.Tensor:
    """Row-major with canonical strides (what a kernel operand must be)."""
    return _canonical(x.contiguous())


def _fold(buf: torch.Tensor, fold: str, axis: int) -> torch.Tensor:
    """Fold per-tile partials along ``axis``; an empty axis gives ``EMPTY_FOLD[fold]``."""
    if buf.shape[axis] == 0:
        shape = [n for i, n in enumerate(buf.shape) if i != axis]
        return torch.full(shape, EMPTY_FOLD[fold], dtype=buf.dtype, device=buf.device)
    if fold == "sum":
        return buf.sum(dim=axis)
    if fold == "max":
        return buf.amax(dim=axis)
    return torch.logsumexp(buf, dim=axis)


class Chain:
    """A loaded build. Call it with the chain's inputs as keyword tensors.

    ``tuned``: where the variant picks come from (see the module docstring): a tune file or a
    directory of them, a tune file's data, a ``coda_spec.tune.TuneTable``, None (the default
    search path) or False (none: every kernel runs ``variants[0]``)."""

    def __init__(self, directory, manifest: dict | None = None, tuned=None):
        self.directory = Path(directory).resolve()
        self.manifest = manifest if manifest is not None else read_manifest(self.directory)
        self.name = self.manifest["name"]
        self._module = None
        self._checked = None
        self._device = None
        self._sms: dict = {}
        self._shapes: dict = {}
        m = self.manifest
        kernels = [
            s for s in list(m["steps"]) + list(m.get("backward_steps", [])) if s["kind"] == "kernel"
        ]
        self._variants = {s["name"]: step_variants(m, s) for s in kernels}
        self._names = {k: [variant_name(v) for v in vs] for k, vs in self._variants.items()}
        dynamic = [k for k, v in m["dims"].items() if v is None]
        self._dynamic = dynamic[0] if dynamic else None
        self._forced: dict = {}  # step -> variant index (with_variants)
        self._table = load_table(tuned)
        self._tuned = self._tuned_rows()
        self._picks: dict | None = None  # {step: rows} once the GPU is checked (first launch)

    def with_manifest(self, manifest: dict) -> Chain:
        """The same library under another manifest (verify's re-sized shapes), with the same
        tune table; forced variants carry over where the new manifest has them (by name)."""
        other = Chain(self.directory, manifest, tuned=self._table)
        other._module, other._checked = self._module, self._checked
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
        steps = list(self.manifest["steps"]) + list(self.manifest.get("backward_steps", []))
        return {
            s["name"]: variant_name(self._variant(s, sizes)) for s in steps if s["kind"] == "kernel"
        }

    def _tuned_rows(self) -> list:
        """[(path, gpu, {step: ((m_max, variant index), ...)})]: the tune table's entries for
        this build at this chain's static dims whose config is one of the step's variants."""
        static = {k: v for k, v in self.manifest["dims"].items() if v is not None}
        out = []
        for path, entry in self._table.builds(self.directory.name):
            rows = {}
            for step, entries in entry["kernels"].items():
                names = self._names.get(step)
                if not names or len(names) < 2:
                    continue
                got: dict = {}
                for e in entries:
                    if e["dims"] == static and e["config"] in names:
                        got.setdefault(e["m_max"], names.index(e["config"]))
                if got:
                    rows[step] = tuple(sorted(got.items()))
            if rows:
                out.append((path, entry["gpu"], rows))
        return out

    def _tuned_picks(self) -> dict:
        """{step: rows} usable on this GPU; decided once, at the first launch."""
        if self._picks is None:
            picks: dict = {}
            if self._tuned:
                device = self._device if self._device is not None else _current_device()
                gpu = _device_name(device)
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
                        stacklevel=4,
                    )
            self._picks = picks
        return self._picks

    def _variant(self, step: dict, sizes: dict) -> dict:
        """The variant a kernel step runs at ``sizes``: forced, else tuned, else variants[0]."""
        name = step["name"]
        variants = self._variants.get(name) or step_variants(self.manifest, step)
        index = self._forced.get(name)
        if index is None:
            index = 0
            if len(variants) > 1 and self._tuned:
                rows = self._tuned_picks().get(name)
                if rows:
                    index = _pick(rows, int(sizes.get(self._dynamic, 0)))
        return variants[index]

    @property
    def required_inputs(self) -> list[str]:
        """Inputs a call must pass: those some step reads (every input of a format-2 build)."""
        return [t["name"] for t in self.manifest["inputs"] if input_required(t)]

    # -- validation --------------------------------------------------------------------------
    def bind(self, inputs: dict) -> dict:
        """Validate inputs; return the dim sizes they imply."""
        return self._validate(inputs, None)[1]

    def _validate(self, inputs: dict, grads: dict | None) -> tuple[dict, dict]:
        """Everything a call checks, before any launch: returns (env, sizes), env holding the
        required inputs (and gradients) as validated, canonically strided tensors."""
        m = self.manifest
        declared = {t["name"]: t for t in m["inputs"]}
        required = {n: t for n, t in declared.items() if input_required(t)}
        unknown = set(inputs) - set(declared)
        if unknown:
            raise CodaRuntimeError(
                f"{self.name}: unknown input(s) {sorted(unknown)}; expected {sorted(declared)}"
            )
        missing = [n for n in required if n not in inputs]
        if missing:
            raise CodaRuntimeError(f"{self.name}: missing input(s) {missing}")
        device = _current_device()
        sizes = {k: v for k, v in m["dims"].items() if v is not None}
        env = self._check(required, inputs, sizes, "input", device)
        if grads is not None:
            if not m.get("backward_steps"):
                raise CodaRuntimeError(f"{self.name}: the chain has no backward section")
            wanted = {t["name"]: t for t in m.get("grads_in", [])}
            missing = [n for n in wanted if n not in grads]
            unknown = set(grads) - set(wanted)
            if missing or unknown:
                raise CodaRuntimeError(
                    f"{self.name}: backward needs gradients {sorted(wanted)}; missing "
                    f"{missing}, unknown {sorted(unknown)}"
                )
            env.update(self._check(wanted, grads, sizes, "gradient", device))
        self._device = device
        return env, sizes

    def _declared_shape(self, name: str, shape: list) -> list:
        """A manifest shape folded: static expressions ("2*F", "D+KV") to ints, a dynamic dim
        (which only ever appears alone) to its name."""
        if name not in self._shapes:
            self._shapes[name] = [dimmod.fold(d, self.manifest["dims"]) for d in shape]
        return self._shapes[name]

    def _check(self, declared: dict, tensors: dict, sizes: dict, what: str, device) -> dict:
        """Device, dtype, shape (binding dynamic dims into ``sizes``), contiguity, alignment.
        Returns the tensors, canonically strided (:func:`_canonical`)."""
        out = {}
        for name, t in declared.items():
            shape = self._declared_shape(name, t["shape"])
            x = tensors[name]
            where = f"{self.name}: {what} '{name}'"
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
            if x.data_ptr() % 16:
                raise CodaRuntimeError(f"{where} is not 16-byte aligned (TMA needs it)")
            # DLPack refuses tensors that require grad; kernels write raw memory anyway
            out[name] = _canonical(x.detach() if x.requires_grad else x)
        return out

    # -- planning ----------------------------------------------------------------------------
    def gemm_extents(self, step: dict, sizes: dict) -> tuple[int, int, int]:
        """(M, N, K) of a kernel step's GEMM ``acc = a' @ b'`` at ``sizes``."""
        return gemm_extents(self.manifest, step, sizes)

    def launches(self, step: dict, sizes: dict) -> bool:
        """Whether a kernel step launches its kernel at ``sizes``: not when its GEMM is empty."""
        return 0 not in self.gemm_extents(step, sizes)

    def plan(self, sizes: dict, backward: bool = False) -> list[tuple[str, str]]:
        """What a call at ``sizes`` would do, step by step, without doing it: ``(step, what)``
        with what = ``launch``, ``no launch`` (an empty GEMM: its epilogue runs in torch),
        ``finalize`` or ``host``."""
        m = self.manifest
        sizes = {**{k: v for k, v in m["dims"].items() if v is not None}, **sizes}
        steps = list(m["steps"]) + (list(m.get("backward_steps", [])) if backward else [])
        out = []
        for s in steps:
            if s["kind"] == "kernel":
                out.append((s["name"], "launch" if self.launches(s, sizes) else "no launch"))
            else:
                out.append((s["name"], s["kind"]))
        return out

    # -- execution ---------------------------------------------------------------------------
    def __call__(self, **inputs) -> dict:
        env = self.run(inputs)
        return {o["name"]: env[o["name"]] for o in self.manifest["outputs"]}

    def run(self, inputs: dict, poison: bool = False, grads: dict | None = None) -> dict:
        """Run every forward step — and, with ``grads`` (the incoming gradients named in the
        spec's ``backward.grads``), every backward step — and return every chain tensor
        (required inputs, outputs, intermediates, partial buffers). ``poison`` fills every buffer
        a kernel writes with NaN first, so a verifier can prove each element and partial slot
        was written. Inputs and gradients are all validated before the first step runs."""
        env, sizes = self._validate(inputs, grads)
        self._poison = poison
        partials: dict = {}
        with torch.no_grad():  # kernels write raw memory; autograd wraps calls, not steps
            self._steps(self.manifest["steps"], env, sizes, partials)
            if grads is not None:
                self._steps(self.manifest["backward_steps"], env, sizes, partials)
        return env

    def backward(self, env: dict, **grads) -> dict:
        """Gradients of the forward inputs, given a forward ``env`` from :meth:`run`'s inputs."""
        missing = [n for n in self.required_inputs if n not in env]
        if missing:
            raise CodaRuntimeError(
                f"{self.name}: backward needs the forward inputs; env lacks {missing}"
            )
        inputs = {n: env[n] for n in self.required_inputs}
        out = self.run(inputs, grads=grads)
        return {o["name"]: out[o["name"]] for o in self.manifest.get("backward_outputs", [])}

    def steps_fn(self, env: dict, sizes: dict, steps: list[dict]):
        """A callable that runs ``steps`` (manifest step dicts: one kernel, or the backward
        section) on a shallow copy of ``env`` -- the tensors of a finished :meth:`run` -- and
        returns that copy. Each call allocates its outputs afresh, as a real call does; an
        ``add_to`` output accumulates into ``env``'s tensor again. Inputs are not re-validated:
        for timing one kernel or one section alone (``coda bench``), not for users."""
        self._device = _current_device()
        self._poison = False

        def call() -> dict:
            work = dict(env)
            with torch.no_grad():
                self._steps(steps, work, sizes, {})
            return work

        return call

    def _steps(self, steps, env, sizes, partials):
        for step in steps:
            if step["kind"] == "kernel":
                if self.launches(step, sizes):
                    self._kernel(step, env, sizes, partials)
                else:
                    self._no_launch(step, env, sizes, partials)
            elif step["kind"] == "finalize":
                self._finalize(step, env, sizes, partials)
            else:
                self._host(step, env, sizes, partials)

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
        if dev not in self._sms:
            self._sms[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
        return self._sms[dev]

    def _kernel(self, step, env, sizes, partials):
        dev = self._device
        v = self._variant(step, sizes)
        a_t, a_tr = step["a"]
        b_t, b_tr = step["b"]
        a = env[a_t].T if a_tr else env[a_t]
        b_val = env[b_t].T if b_tr else env[b_t]
        b = b_val.T  # QuACK's B is (N, K)
        for what, x in (("A", a), ("B", b)):
            want = v["majors"][what]
            if ("row" if x.stride(-1) == 1 else "col") != want:
                raise CodaRuntimeError(
                    f"{self.name}: kernel '{step['name']}' operand {what} must be {want}-major"
                )
        d = None
        if step["d"] is not None:
            name, dtype, shape = step["d"]
            if step["add_to"]:
                d = env[step["add_to"]]
            else:
                d = self._alloc(eval_shape(shape, sizes), TORCH_DTYPES[dtype], dev)
        c = env[step["c"][0]] if step["c"] is not None else None
        made, args = {}, {}
        for f in v["fields"]:  # partial buffers sized by this variant's tile
            args[f["name"]] = self._field(f, env, sizes, dev, made, partials)
        epi = tuple(None if n in SPLIT_K else args[n] for n in v["field_order"])
        cfg = v["config"]
        mac = self._sm_count(dev) // (cfg["cluster_m"] * cfg["cluster_n"])
        sched = (mac, None, v["max_swizzle_size"], None, None, None)
        fn = self._fn(v["symbol"])
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

    def _no_launch(self, step, env, sizes, partials):
        """A kernel step whose GEMM is empty: no launch; its epilogue runs in torch (the
        reference interpreter, fp32) on ``acc = a @ b`` -- empty, or zeros when only K = 0.
        Outputs get their declared dtypes; an ``add_to`` output is written into (and returned
        as) the tensor it accumulates into; partials are exact and fold like kernel ones."""
        from coda_spec.reference import PRECISIONS, _run_step

        checked = self.checked()
        work = {k: v for k, v in env.items() if isinstance(v, torch.Tensor)}
        _run_step((PRECISIONS["fp32"], sizes, checked.analysis), self._spec_step(step), work)
        if step["d"] is not None:
            name, dtype, _ = step["d"]
            value = work[name].to(TORCH_DTYPES[dtype])
            if step["add_to"]:
                into = env[step["add_to"]]
                into.copy_(value)
                env[name] = into
            else:
                env[name] = _dense(value)
        for f in step["fields"]:
            t = f["tensor"]
            if f["role"] in ("aux", "select"):
                env[t] = _dense(work[t].to(TORCH_DTYPES[f["dtype"]]))
            elif f["role"] in PARTIAL_ROLES:
                env[t] = _dense(work[t].float())
                partials[t] = (f["role"], f["fold"])

    def _spec_step(self, step):
        spec = self.checked().spec
        steps = list(spec.steps) + list(spec.backward.steps if spec.backward else ())
        return next(s for s in steps if s.kind == step["kind"] and s.name == step["name"])

    def _field(self, f, env, sizes, dev, made, partials):
        role, t = f["role"], f["tensor"]
        if role in ("tile", "index"):
            return env[t]
        if role == "row":
            x = env[t]
            return _turns_table(x) if f["transform"] == "turns_table" else x.reshape(1, -1)
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
        shape = eval_shape(f["shape"], sizes)
        dtype = TORCH_DTYPES[f["dtype"]]
        if role == "select" and not self._poison:
            buf = torch.zeros(shape, dtype=dtype, device=dev)  # ignored rows stay 0
        else:
            buf = self._alloc(shape, dtype, dev)
        if role in PARTIAL_ROLES:
            partials[t] = (role, f["fold"])
        made[t] = buf
        return buf

    def _alloc(self, shape, dtype, dev):
        if getattr(self, "_poison", False):
            return torch.full(shape, float("nan"), dtype=dtype, device=dev)
        return torch.empty(shape, dtype=dtype, device=dev)

    def _finalize(self, step, env, sizes, partials):
        role, fold = partials[step["of"]]
        buf = env[step["of"]]
        if role == "exact":  # a host step's reduction: already complete
            x = buf.reshape(-1) if 1 in buf.shape else buf
        elif role == "group_out":  # (M, N/group) per-(row, group) statistics: already complete
            x = buf.reshape(-1) if buf.shape[1] == 1 else buf
        else:  # colred (M, n_tiles) folds along N-tiles; rowred (m_tiles, N) along M-tiles:
            # the tile count follows the variant that wrote the buffer; any count folds alike
            x = _fold(buf, fold, 1 if role == "colred" else 0)
        n = step["n"]
        n = eval_shape([n], sizes)[0] if isinstance(n, str) else n
        if step["op"] == "mean":
            x = mean_of(x, n)
        elif step["op"] == "rsqrt_mean":
            x = torch.rsqrt(mean_of(x, n) + step["eps"])
        env[step["result"]] = x

    def _host(self, step, env, sizes, partials):
        from coda_spec.reference import PRECISIONS, _run_step

        checked = self.checked()
        work = {k: v for k, v in env.items() if isinstance(v, torch.Tensor)}
        _run_step((PRECISIONS["fp32"], sizes, checked.analysis), self._spec_step(step), work)
        for name in step["writes"]:
            if checked.analysis.tensor(name).origin == "partial":
                partials[name] = ("exact", None)
                env[name] = work[name]
                continue
            dtype = self.manifest["tensors"][name]["dtype"]
            env[name] = _dense(work[name].to(TORCH_DTYPES[dtype]))  # may feed a kernel

    def checked(self):
        """The build's own spec, checked (host steps and empty GEMMs interpret it)."""
        if self._checked is None:
            from coda_spec.frontend import check_source
            from coda_spec.source import parse_text

            text = (self.directory / "spec.yaml").read_text()
            self._checked = check_source(parse_text(self.manifest["spec_file"], text))
        return self._checked


def load(directory, tuned=None) -> Chain:
    """Load a build directory (``build/<name>-<hash>`` or ``build/<name>-latest``). ``tuned``:
    the tune table to pick variants from (a file or directory path, a loaded table, False for
    none); None: ``$CODA_TUNED``, else ``./tuned/*.json`` (see ``coda_spec.tune``)."""
    return Chain(directory, tuned=tuned)
