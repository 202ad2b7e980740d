"""Load a built chain and call it with torch CUDA tensors. Imports neither cutlass nor quack.

    chain = coda_spec.load("build/rmsnorm_chain-latest")
    out = chain(y=y, w_o=w_o, x=x, gamma=gamma, w_up=w_up)   # {"x1": ..., "r": ..., "out": ...}

What a call does, from ``manifest.json`` alone (see ``coda_spec.artifact``):

1. validates every input before any launch: present, a CUDA tensor on the current device, the
   declared dtype and shape (static dims exact, dynamic dims consistent), row-major contiguous,
   16-byte aligned; an unknown keyword is an error too;
2. runs the steps in order: each kernel gets its operands as views (Linear weights as (N, K),
   per-row vectors as (1, M), per-column vectors as (1, N)), freshly allocated outputs and
   partial buffers (fp32, sized from the build's tile config), and
   ``max_active_clusters = SMs // cluster size``; finalize steps fold partials in torch; host
   steps run the spec's reference math in torch;
3. returns the declared outputs. ``add_to`` outputs are written IN PLACE into the tensor they
   accumulate into (that is the point of QuACK's add_to_output), which is returned under the
   output's name.

Library lookup (``libcute_dsl_runtime.so``, needed by every exported kernel): the file named by
``$CODA_CUTE_DSL_RUNTIME``, then the build directory, then the installed ``nvidia-cutlass-dsl``
(found without importing it), then ``$LD_LIBRARY_PATH``. It is preloaded with RTLD_GLOBAL.
"""

from __future__ import annotations

import ctypes
import importlib.util
import math
import os
from pathlib import Path

import torch

from coda_spec.artifact import eval_shape, read_manifest
from coda_spec.reference import TORCH_DTYPES

LIB = "libcute_dsl_runtime.so"
LIB_ENV = "CODA_CUTE_DSL_RUNTIME"
SPLIT_K = ("split_k_semaphore", "split_k_workspace")


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


class Chain:
    """A loaded build. Call it with the chain's inputs as keyword tensors."""

    def __init__(self, directory, manifest: dict | None = None):
        self.directory = Path(directory).resolve()
        self.manifest = manifest if manifest is not None else read_manifest(self.directory)
        self.name = self.manifest["name"]
        self._module = None
        self._checked = None

    def with_manifest(self, manifest: dict) -> Chain:
        """The same library under another manifest (verify's re-sized shapes)."""
        other = Chain(self.directory, manifest)
        other._module, other._checked = self._module, self._checked
        return other

    # -- validation --------------------------------------------------------------------------
    def bind(self, inputs: dict) -> dict:
        """Validate inputs; return the dim sizes they imply."""
        m = self.manifest
        declared = {t["name"]: t for t in m["inputs"]}
        unknown = set(inputs) - set(declared)
        if unknown:
            raise CodaRuntimeError(
                f"{self.name}: unknown input(s) {sorted(unknown)}; expected {sorted(declared)}"
            )
        missing = [n for n in declared if n not in inputs]
        if missing:
            raise CodaRuntimeError(f"{self.name}: missing input(s) {missing}")
        sizes = {k: v for k, v in m["dims"].items() if v is not None}
        self._check(declared, inputs, sizes, "input")
        return sizes

    def _check(self, declared: dict, tensors: dict, sizes: dict, what: str) -> None:
        """Device, dtype, shape (binding dynamic dims into ``sizes``), contiguity, alignment."""
        device = torch.device("cuda", torch.cuda.current_device())
        for name, t in declared.items():
            x = tensors[name]
            where = f"{self.name}: {what} '{name}'"
            if not isinstance(x, torch.Tensor):
                raise CodaRuntimeError(f"{where} is {type(x).__name__}, not a torch.Tensor")
            if x.device != device:
                raise CodaRuntimeError(f"{where} is on {x.device}; kernels run on {device}")
            if x.dtype != TORCH_DTYPES[t["dtype"]]:
                raise CodaRuntimeError(f"{where} is {x.dtype}; expected {t['dtype']}")
            if x.dim() != len(t["shape"]):
                raise CodaRuntimeError(f"{where} has shape {tuple(x.shape)}; expected {t['shape']}")
            for axis, (want, got) in enumerate(zip(t["shape"], x.shape, strict=True)):
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

    # -- execution ---------------------------------------------------------------------------
    def __call__(self, **inputs) -> dict:
        env = self.run(inputs)
        return {o["name"]: env[o["name"]] for o in self.manifest["outputs"]}

    def run(self, inputs: dict, poison: bool = False, grads: dict | None = None) -> dict:
        """Run every forward step — and, with ``grads`` (the incoming gradients named in the
        spec's ``backward.grads``), every backward step — and return every chain tensor
        (inputs, outputs, intermediates, partial buffers). ``poison`` fills every buffer a kernel
        writes with NaN first, so a verifier can prove each element and partial slot was
        written."""
        sizes = self.bind(inputs)
        self._poison = poison
        env = dict(inputs)
        partials: dict = {}
        self._steps(self.manifest["steps"], env, sizes, partials)
        if grads is not None:
            declared = {t["name"]: t for t in self.manifest.get("grads_in", [])}
            if not self.manifest.get("backward_steps"):
                raise CodaRuntimeError(f"{self.name}: the chain has no backward section")
            missing = [n for n in declared if n not in grads]
            unknown = set(grads) - set(declared)
            if missing or unknown:
                raise CodaRuntimeError(
                    f"{self.name}: backward needs gradients "
                    f"{sorted(declared)}; missing {missing}, unknown "
                    f"{sorted(unknown)}"
                )
            self._check(declared, grads, sizes, "gradient")
            env.update(grads)
            self._steps(self.manifest["backward_steps"], env, sizes, partials)
        return env

    def backward(self, env: dict, **grads) -> dict:
        """Gradients of the forward inputs, given a forward ``env`` from :meth:`run`'s inputs."""
        inputs = {t["name"]: env[t["name"]] for t in self.manifest["inputs"]}
        out = self.run(inputs, grads=grads)
        return {o["name"]: out[o["name"]] for o in self.manifest.get("backward_outputs", [])}

    def _steps(self, steps, env, sizes, partials):
        for step in steps:
            if step["kind"] == "kernel":
                self._kernel(step, env, sizes, partials)
            elif step["kind"] == "finalize":
                self._finalize(step, env, sizes, partials)
            else:
                self._host(step, env, sizes, partials)

    def _fn(self, symbol: str):
        if self._module is None:
            tvm_ffi = _load_library(self.directory)
            self._module = tvm_ffi.load_module(str(self.directory / self.manifest["library"]))
        return self._module[symbol]

    def _kernel(self, step, env, sizes, partials):
        dev = torch.device("cuda", torch.cuda.current_device())
        a_t, a_tr = step["a"]
        b_t, b_tr = step["b"]
        a = env[a_t].T if a_tr else env[a_t]
        b_val = env[b_t].T if b_tr else env[b_t]
        b = b_val.T  # QuACK's B is (N, K)
        for what, x in (("A", a), ("B", b)):
            want = step["majors"][what]
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
        for f in step["fields"]:
            args[f["name"]] = self._field(f, env, sizes, dev, made, partials)
        epi = tuple(None if n in SPLIT_K else args[n] for n in step["field_order"])
        cfg = self.manifest["config"]
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        mac = sms // (cfg["cluster_m"] * cfg["cluster_n"])
        sched = (mac, None, step["max_swizzle_size"], None, None, None)
        self._fn(step["symbol"])(a, b, d, c, epi, sched, None, None, None)
        if d is not None:
            env[step["d"][0]] = d
        env.update(made)

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
        if role in ("colred", "rowred", "group_out"):
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
        axis = 1 if role == "colred" else 0
        if role == "exact":  # a host step's reduction: already complete
            x = buf.reshape(-1) if 1 in buf.shape else buf
        elif role == "group_out":  # (M, N/group) per-(row, group) statistics: already complete
            x = buf.reshape(-1) if buf.shape[1] == 1 else buf
        elif fold == "sum":
            x = buf.sum(dim=axis)
        elif fold == "max":
            x = buf.amax(dim=axis)
        else:
            x = torch.logsumexp(buf, dim=axis)
        n = step["n"]
        n = sizes[n] if isinstance(n, str) else n
        if step["op"] == "mean":
            x = x / n
        elif step["op"] == "rsqrt_mean":
            x = torch.rsqrt(x / n + step["eps"])
        env[step["result"]] = x

    def _host(self, step, env, sizes, partials):
        from coda_spec.reference import PRECISIONS, _run_step

        checked = self.checked()
        spec = checked.spec
        steps = list(spec.steps) + list(spec.backward.steps if spec.backward else ())
        spec_step = next(s for s in steps if s.kind == "host" and s.name == step["name"])
        work = {k: v for k, v in env.items() if isinstance(v, torch.Tensor)}
        _run_step((PRECISIONS["fp32"], sizes, checked.analysis), spec_step, work)
        for name in step["writes"]:
            if checked.analysis.tensor(name).origin == "partial":
                partials[name] = ("exact", None)
                env[name] = work[name]
                continue
            dtype = self.manifest["tensors"][name]["dtype"]
            env[name] = work[name].to(TORCH_DTYPES[dtype])

    def checked(self):
        """The build's own spec, checked (host steps interpret it)."""
        if self._checked is None:
            from coda_spec.frontend import check_source
            from coda_spec.source import parse_text

            text = (self.directory / "spec.yaml").read_text()
            self._checked = check_source(parse_text(self.manifest["spec_file"], text))
        return self._checked


def load(directory) -> Chain:
    """Load a build directory (``build/<name>-<hash>`` or ``build/<name>-latest``)."""
    return Chain(directory)
