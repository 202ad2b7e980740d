"""Launching a step: the exported GEMM kernels through TVM-FFI, host and finalize cubins through
the CUDA driver (``coda_spec.runtime.cubin``).

QuACK's call ABI for an exported GEMM is named once, :func:`quack_gemm`. A kernel gets its
operands as views (Linear weights as (N, K), per-row vectors as (1, M), per-column vectors as
(1, N)), freshly allocated outputs and partial buffers (fp32, sized from the chosen variant's
tile config) and ``max_active_clusters = SMs // cluster size``. A compiled step (host, finalize)
gets its outputs allocated (a host step's ``store ... over: t`` output is ``t``'s buffer, neither
allocated nor poisoned), its arguments bound (:func:`launch_values`, :func:`launch_grid`) and
one launch; its aligned cubin when the call's i32 arguments allow it.

Empty GEMMs launch nothing (QuACK's scheduler cannot take an empty grid): with M or N empty the
outputs and partial buffers are only allocated; with only K empty a store of ``acc`` alone
writes zeros, any other epilogue runs on zero operands of K = ``ZERO_K`` (acc is exactly 0).

State (a :class:`Launcher` per chain, filled at first use and shared by re-sized and
variant-forced copies of the chain): the library and the exported functions, the SM count per
device (after the sm_90 check), the loaded cubins, RoPE turns tables per frequency tensor, and
column tables per (N, device). Tables are kept only by calls that may keep state (``Call.cache``:
not a torch op's call, whose CUDA-graph trees want every allocation to be an output) and not
while the stream captures a CUDA graph: a capture records the kernels that fill a table without
running them, so a table made then holds its values only once the graph replays. Such calls
make their tables as temporaries, which the graph fills at every replay. Under a capture a turns
table is always made so, from the frequencies the graph reads at each replay (a kept one would
go stale when new values are copied into them); a column table never changes, so a kept one is
read by every call.

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
import weakref
from pathlib import Path

import torch

from coda_spec import dims as dimmod
from coda_spec.artifact import F32_BITS, SPLIT_K, KernelStep, Manifest
from coda_spec.dtypes import FP32_EXACT, TORCH_DTYPES
from coda_spec.runtime.call import Call, alloc
from coda_spec.runtime.cubin import Cubin, LaunchError
from coda_spec.runtime.plan import CodaRuntimeError, Plan

LIB = "libcute_dsl_runtime.so"
LIB_ENV = "CODA_CUTE_DSL_RUNTIME"
TABLES_KEPT = 8  # RoPE tables kept before those of dead tensors are dropped
ZERO_K = 16  # the K of the zero operands an empty-K GEMM runs on (16 bytes of fp8, 32 of bf16)


def quack_gemm(fn, a, b, d, c, epi: tuple, max_active_clusters: int, max_swizzle_size: int):
    """Call a GEMM exported from QuACK's sm90 kernel: A (M, K), B (N, K), D, C, the epilogue
    arguments in the compiled order, then the scheduler's options (the other positions are
    QuACK's varlen and split-K arguments, unused)."""
    sched = (max_active_clusters, None, max_swizzle_size, None, None, None)
    return fn(a, b, d, c, epi, sched, None, None, None)


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


def turns_table(freqs: torch.Tensor) -> torch.Tensor:
    """Per-pair frequencies -> QuACK's float-float table of freq/2pi (hi, lo) per pair."""
    turns = freqs.double() / (2 * math.pi)
    hi = turns.float()
    lo = (turns - hi.double()).float()
    return torch.stack([hi, lo], dim=-1).reshape(1, -1)


def halves(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Per-pair frequencies (pair j of head h at h * hd/2 + j) -> one per column of Hugging
    Face's rotate-half layout: each head's hd/2 frequencies twice (columns j and j + hd/2)."""
    return x.reshape(-1, 1, head_dim // 2).expand(-1, 2, -1).reshape(-1)


def turns_part(x: torch.Tensor, part: str) -> torch.Tensor:
    """The hi or lo fp32 half of each value's float-float freq/2pi (as :func:`turns_table`)."""
    turns = x.double() / (2 * math.pi)
    hi = turns.float()
    return (hi if part == "turns_hi" else (turns - hi.double()).float()).reshape(1, -1)


def row_table(x: torch.Tensor, transform: str, width: int) -> torch.Tensor:
    """A row vector field's (1, ``width``) buffer from the chain tensor ``x`` by ``transform``, a
    ``+``-joined pipeline of ``repeat`` (a per-head vector repeated end to end to the field's
    values: ``width``, or ``width / 2`` pairs before ``turns_table`` or ``halves``),
    ``turns_table``, and rotate-half RoPE's ``halves=<head_dim>`` (:func:`halves`) then
    ``turns_hi`` or ``turns_lo`` (:func:`turns_part`)."""
    steps = transform.split("+")
    known = ("repeat", "turns_table", "turns_hi", "turns_lo")
    unknown = [s for s in steps if s not in known and not s.startswith("halves=")]
    if unknown:
        raise CodaRuntimeError(f"unknown row transform '{unknown[0]}' in the manifest")
    half = next((int(s.split("=", 1)[1]) for s in steps if s.startswith("halves=")), 0)
    if "repeat" in steps:
        want = width // 2 if "turns_table" in steps or half else width
        x = x.reshape(-1)
        if x.numel() == 0 or want % x.numel():
            raise CodaRuntimeError(
                f"a repeated row vector of {x.numel()} values cannot fill {want} columns"
            )
        x = x.float().repeat(want // x.numel())
    if half:
        x = halves(x, half)
    if "turns_table" in steps:
        return turns_table(x)
    for part in ("turns_hi", "turns_lo"):
        if part in steps:
            return turns_part(x, part)
    return x.reshape(1, -1)


def column_table(n: int, device, what: str = "N") -> torch.Tensor:
    """The column table of a GEMM over ``n`` columns: fp32 0, 1, ..., n - 1 as (1, n), which a
    kernel reads as a ``RowVecLoad`` to know each element's global column (``onehot``,
    ``col_index``)."""
    if n > FP32_EXACT:
        raise CodaRuntimeError(
            f"GEMM {what} is {n}: a kernel's {'column' if what == 'N' else 'row'} indices are "
            f"fp32, exact up to {FP32_EXACT}; split the GEMM over {what}"
        )
    return torch.arange(n, dtype=torch.float32, device=device).reshape(1, n)


def _capturing(device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _dim(expr, sizes: dict, env: dict | None = None) -> int:
    """A launch argument or grid entry: an int, a dim expression (``M``, ``3*D``,
    ``cdiv(M,4)``) or ``{"extent": [tensor, axis], "block": B}`` (cdiv of that axis of that
    tensor as it is now)."""
    if isinstance(expr, int):
        return expr
    if not isinstance(expr, str):
        t, axis = expr["extent"]
        return -(-int(env[t].shape[axis]) // int(expr.get("block", 1)))
    return _evaluator(expr)(sizes)


@functools.lru_cache(maxsize=1024)
def _evaluator(expr: str):
    """A dim expression compiled once (``coda_spec.dims.evaluator``, the one evaluator)."""
    return dimmod.evaluator(expr)


def launch_values(args: tuple, env: dict, sizes: dict) -> list:
    """The arguments (``Launch.args``) of a compiled step at this call: the chain tensor for a
    ``tensor`` argument (the launcher passes its pointer), an int otherwise."""
    out = []
    for a in args:
        if a.tensor is not None:
            out.append(env[a.tensor])
        elif a.dim is not None:
            out.append(_dim(a.dim, sizes))
        else:
            t, axis = a.extent
            out.append(int(env[t].shape[axis]) // a.div)
    return out


def launch_grid(grid: tuple, env: dict, sizes: dict) -> tuple:
    """The grid (``Launch.grid``) of a compiled step at this call."""
    return tuple(_dim(g, sizes, env) for g in grid)


def _zero_operand(rows: int, major: str, dtype, device) -> torch.Tensor:
    """A (rows, ZERO_K) zero operand, K-contiguous ("row") or rows-contiguous ("col")."""
    if major == "row":
        return torch.zeros(rows, ZERO_K, dtype=dtype, device=device)
    return torch.zeros(ZERO_K, rows, dtype=dtype, device=device).T


class Launcher:
    """What launches a chain's steps, and the GPU-side state it fills at first use."""

    def __init__(self, directory: Path, manifest: Manifest):
        self.directory, self.name, self.library = directory, manifest.name, manifest.library
        self._module = None
        self._fns: dict = {}  # symbol -> exported function, resolved at its first launch
        self._gpus: dict = {}  # device -> SM count, once the GPU is checked (sm_90)
        self._tables: dict = {}  # (id(x), transform, width) -> (weak ref, its version, table)
        self._columns: dict = {}  # (N, device) -> column table; ("rows", M, device) -> row table
        self.cubins = {  # step -> (cubin, aligned cubin or None)
            s.name: (
                Cubin(directory, s.launch.cubin, s.launch.types, s.launch.hidden),
                Cubin(directory, s.launch.aligned, s.launch.types, s.launch.hidden)
                if s.launch.aligned
                else None,
            )
            for s in manifest.all_steps
            if s.kind != "kernel" and s.launch is not None
        }

    # -- the library and the GPU -------------------------------------------------------------
    def function(self, symbol: str):
        """The exported kernel ``symbol`` (the library loaded at the first one)."""
        fn = self._fns.get(symbol)
        if fn is None:
            fn = self._fns[symbol] = self._load(symbol)
        return fn

    def _load(self, symbol: str):
        try:
            if self._module is None:
                ctypes.CDLL(str(find_runtime_library(self.directory)), mode=ctypes.RTLD_GLOBAL)
                import tvm_ffi  # the exported kernels' ABI; after the runtime library

                self._module = tvm_ffi.load_module(str(self.directory / str(self.library)))
            return self._module[symbol]
        except CodaRuntimeError:
            raise
        except Exception as e:  # noqa: BLE001 - an unusable artifact is a runtime error
            raise CodaRuntimeError(
                f"{self.name}: cannot load kernel '{symbol}' from "
                f"{self.directory / str(self.library)}: {e}"
            ) from e

    def sm_count(self, dev) -> int:
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

    # -- kernel steps ------------------------------------------------------------------------
    def kernel(self, plan: Plan, step: KernelStep, v, call: Call) -> None:
        """Launch a kernel step's variant ``v``."""
        env, sizes, dev = call.env, call.sizes, call.device
        mac = self.sm_count(dev) // v.cluster_size
        a, b = self._operands(step, env, v)
        d = None
        if step.d is not None:
            if step.add_to:
                d = env[step.add_to]
            elif step.d.tensor in call.into:  # v is the accumulating kernel: D += result
                d = call.into[step.d.tensor]
            else:
                d = alloc(call, plan.shape(step.d.tensor, sizes), TORCH_DTYPES[step.d.dtype])
        c = env[step.c.tensor] if step.c is not None else None
        made, args = {}, {}
        for f in v.fields:  # partial buffers sized by this variant's tile
            args[f.name] = self.field(plan, f, call, made)
        epi = tuple(None if n in SPLIT_K else args[n] for n in v.field_order)
        fn = self.function(v.symbol)
        try:
            quack_gemm(fn, a, b, d, c, epi, mac, v.max_swizzle_size)
        except Exception as e:  # noqa: BLE001 - the compiled argument check refused
            raise CodaRuntimeError(
                f"{self.name}: kernel '{step.name}' (variant {v.name}) refused its arguments "
                f"(a coda runtime bug: its validation passed them; please report): {e}"
            ) from e
        if d is not None:
            env[step.d.tensor] = d
        env.update(made)

    def _operands(self, step: KernelStep, env, v) -> tuple:
        """QuACK's A (M, K) and B (N, K) as views; with K = 0 (a weight gradient over zero
        rows whose epilogue does more than store acc) zero operands of K = 8 (acc = 0 exactly)
        in the majors the variant was compiled for, so the epilogue still runs on the GPU."""
        a = env[step.a.tensor].T if step.a.transposed else env[step.a.tensor]
        b_val = env[step.b.tensor].T if step.b.transposed else env[step.b.tensor]
        b = b_val.T  # QuACK's B is (N, K)
        if a.shape[1] == 0:
            a = _zero_operand(a.shape[0], v.majors["A"], a.dtype, a.device)
            b = _zero_operand(b.shape[0], v.majors["B"], b.dtype, b.device)
        for what, x in (("A", a), ("B", b)):
            want = v.majors[what]
            if ("row" if x.stride(-1) == 1 else "col") != want:
                raise CodaRuntimeError(
                    f"{self.name}: kernel '{step.name}' operand {what} must be {want}-major"
                )
        return a, b

    def no_launch(self, plan: Plan, step: KernelStep, v, call: Call) -> None:
        """A kernel step that launches nothing at these sizes: its GEMM's M or N is empty
        (outputs and partial buffers allocated, nothing to compute), or only K is empty and the
        epilogue stores ``acc`` alone (zeros). An ``add_to`` output, or a gradient accumulated
        into a given tensor (``call.into``), is the tensor it accumulates into, unchanged (adding
        nothing, or zeros)."""
        env, sizes = call.env, call.sizes
        m, n, _ = plan.gemm_extents(step, sizes)
        if step.d is not None:
            if step.add_to:
                env[step.d.tensor] = env[step.add_to]
            elif step.d.tensor in call.into:
                env[step.d.tensor] = call.into[step.d.tensor]
            else:
                shape = plan.shape(step.d.tensor, sizes)
                env[step.d.tensor] = torch.zeros(
                    shape, dtype=TORCH_DTYPES[step.d.dtype], device=call.device
                )
        if m and n:  # K = 0, acc-only epilogue: no fields
            return
        made: dict = {}
        for f in v.fields:
            if f.writes:
                self.field(plan, f, call, made)
        env.update(made)

    def field(self, plan: Plan, f, call: Call, made: dict):
        """An EpilogueArguments entry's value: a view of a chain tensor it reads, or a fresh
        buffer it writes (recorded in ``made``)."""
        role, t, env = f.role, f.tensor, call.env
        if role in ("tile", "index"):
            # a bool mask tile travels as its bytes: QuACK 0.6.5 maps uint8, not bool
            return env[t].view(torch.uint8) if f.transform == "as_uint8" else env[t]
        if role == "row":
            x = env[t]
            if f.transform == "to_fp32":
                return x.reshape(1, -1).float()
            if f.transform:
                width = plan.field_shape(f, call.sizes)[1]
                if self._keeps(call):
                    return self.table(x, f.transform, width)
                return row_table(x, f.transform, width)
            return x.reshape(1, -1)
        if role == "columns":  # no chain tensor: the table of this call's GEMM N
            n = plan.field_shape(f, call.sizes)[1]
            return self.columns(n, call.device, keep=self._keeps(call))
        if role == "rows":  # no chain tensor: the table of this call's GEMM M (philox)
            m = plan.field_shape(f, call.sizes)[1]
            return self.rows(m, call.device, keep=self._keeps(call))
        if role == "col":
            x = env[t].reshape(1, -1)
            return x.float() if f.transform == "to_fp32" else x
        if role == "scalar":
            x = env[t]
            want = TORCH_DTYPES[f.dtype]  # fp32 (load_scalar) or int64 (a philox seed/offset)
            if x.dtype != want:
                raise CodaRuntimeError(f"{self.name}: scalar '{t}' must be {f.dtype}")
            return x.data_ptr()
        if role == "group_stat":  # a GroupStat's group width: baked in at compile time
            return None
        shape = plan.field_shape(f, call.sizes)
        dtype = TORCH_DTYPES[f.dtype]
        if role == "select" and not call.poison:
            buf = torch.zeros(shape, dtype=dtype, device=call.device)  # ignored rows stay 0
        else:
            buf = alloc(call, shape, dtype)
        made[t] = buf
        if f.transform == F32_BITS:  # an acc_pair kernel's fp32 half-width tile, as its bytes
            return buf.view(torch.bfloat16)
        return buf

    @staticmethod
    def _keeps(call: Call) -> bool:
        """Whether this call may keep the tables it makes (the module docstring)."""
        return call.cache and not _capturing(call.device)

    def columns(self, n: int, device, keep: bool) -> torch.Tensor:
        """The column table for GEMM N ``n`` on ``device``: the kept one, else a new one, kept
        when ``keep`` (its contents never change, so every later call may read it)."""
        key = (n, device)
        table = self._columns.get(key)
        if table is None:
            table = column_table(n, device)
            if keep:
                self._columns[key] = table
        return table

    def rows(self, m: int, device, keep: bool) -> torch.Tensor:
        """The row table for GEMM M ``m`` on ``device`` (fp32 0 .. m - 1 as (1, m)), kept as
        the column table is."""
        key = ("rows", m, device)
        table = self._columns.get(key)
        if table is None:
            table = column_table(m, device, what="M")
            if keep:
                self._columns[key] = table
        return table

    def turns(self, freqs: torch.Tensor) -> torch.Tensor:
        """RoPE's turns table of a frequency tensor (:meth:`table`)."""
        return self.table(freqs, "turns_table", 2 * freqs.numel())

    def table(self, x: torch.Tensor, transform: str, width: int) -> torch.Tensor:
        """A row field's derived table (:func:`row_table`: RoPE's turns table, a repeated
        per-head vector), computed once per tensor, transform and width: kept while that tensor
        object lives (a weak reference, never its address: a freed tensor's memory is reused by
        the next one), recomputed when its version counter moves."""
        key = (id(x), transform, width)
        seen = self._tables.get(key)
        if seen is not None and seen[0]() is x and seen[1] == x._version:
            return seen[2]
        table = row_table(x, transform, width)
        if len(self._tables) >= TABLES_KEPT:  # forget the tables of tensors that are gone
            for k in [k for k, v in self._tables.items() if v[0]() is None]:
                del self._tables[k]
        self._tables[key] = (weakref.ref(x), x._version, table)
        return table

    # -- compiled steps (host, finalize) -----------------------------------------------------
    def compiled(self, plan: Plan, step, call: Call) -> None:
        """Allocate a compiled step's outputs, bind its arguments, launch it (no launch over
        an empty grid)."""
        launch, env, sizes = step.launch, call.env, call.sizes
        for o in launch.outputs:
            if o.over is not None:  # written over a tile it reads: that buffer, not poisoned
                env[o.tensor] = env[o.over]
                continue
            dtype = TORCH_DTYPES[o.dtype]
            # the launch's own shape: a host reduce_col's partial is (rows, W), not its result's
            shape = plan.field_shape(o, sizes)
            if o.zeros and not call.poison:
                env[o.tensor] = torch.zeros(shape, dtype=dtype, device=call.device)
            else:
                env[o.tensor] = alloc(call, shape, dtype)
        align = launch.pointer_align
        args = []
        for a, v in zip(launch.args, launch_values(launch.args, env, sizes), strict=True):
            if isinstance(v, torch.Tensor):
                v = v.data_ptr()
                if v % align:
                    raise CodaRuntimeError(
                        f"{self.name}: step '{step.name}' reads '{a.tensor}' at an address "
                        f"that is not {align}-byte aligned"
                    )
            args.append(v)
        grid = launch_grid(launch.grid, env, sizes)
        generic, fast = self.cubins[step.name]
        if fast is not None and all(
            args[i] % launch.aligned_multiple == 0 for i in launch.aligned_params
        ):
            generic = fast
        if call.device.type == "cuda":
            self.sm_count(call.device)  # the architecture check
        try:
            generic.launch(call.device.index or 0, call.stream, grid, tuple(args))
        except LaunchError as e:
            raise CodaRuntimeError(f"{self.name}: step '{step.name}': {e}") from e
