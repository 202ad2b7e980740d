"""Launch ahead-of-time cubins (host steps, finalizes) through the CUDA driver. Runtime side.

The build compiles host steps and finalizes to sm_90a cubins (``coda_spec.lower.triton_aot``);
this module loads one with ``cuModuleLoadData`` and launches it with ``cuLaunchKernel`` on
torch's current stream, so deployment needs only ``libcuda`` -- no Triton, no compiler. A launch
on a capturing stream is recorded into the CUDA graph like any other kernel.

Contract: :class:`Cubin` takes the build directory, a cubin of a manifest ``launch`` entry
(``coda_spec.artifact.Cubin``; the entry's format is ``triton_aot``'s), the entry's parameter
types and its count of hidden parameters; :meth:`Cubin.launch` takes the grid and the explicit
arguments (device pointers as ints for ``*`` types, ints for ``i32``, floats for ``fp32``) in
the entry's order. The module is
loaded once per device, at its first launch there (the driver needs a context: torch's primary
context, made current on this thread if it is not).
"""

from __future__ import annotations

import ctypes
import struct
import threading
from pathlib import Path

_FUNC_ATTR_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_STATIC_SHARED_LIMIT = 48 * 1024


class LaunchError(RuntimeError):
    """The driver refused to load or launch a cubin."""


def _driver():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise LaunchError(f"cannot load the CUDA driver (libcuda.so.1): {e}") from e


def _check(cuda, result: int, what: str) -> None:
    if result:
        msg = ctypes.c_char_p()
        cuda.cuGetErrorString(result, ctypes.byref(msg))
        text = msg.value.decode() if msg.value else "unknown error"
        raise LaunchError(f"{what}: CUDA driver error {result} ({text})")


_FORMAT = {"i32": "i", "i64": "q", "fp32": "f"}  # struct codes; pointers are "Q"


def _code(kind: str) -> str:
    if kind.startswith("*"):
        return "Q"
    if kind in _FORMAT:
        return _FORMAT[kind]
    raise LaunchError(f"unsupported kernel parameter type {kind!r}")


def _layout(kinds) -> tuple[str, tuple]:
    """The parameters packed as one native-aligned struct: (format, offset of each)."""
    fmt, offsets = "@", []
    for code in kinds:
        offsets.append(struct.calcsize(fmt + code) - struct.calcsize(code))
        fmt += code
    return fmt, tuple(offsets)


class Cubin:
    """One compiled kernel, loaded lazily per device."""

    def __init__(self, directory: Path, entry, types: tuple, hidden: int):
        self.path = Path(directory) / entry.cubin
        self.name = entry.name
        self.block = 32 * entry.num_warps
        self.shared = entry.shared
        self.hidden = hidden
        codes = [_code(t) for t in types] + ["Q"] * self.hidden
        self.format, self.offsets = _layout(codes)
        self.scratch = (0,) * self.hidden  # Triton's scratch pointers: NULL
        self.pointers = ctypes.c_void_p * len(codes)
        self._functions: dict = {}  # device index -> CUfunction (filled once per device)
        self._lock = threading.Lock()

    def _function(self, device: int):
        fn = self._functions.get(device)
        if fn is not None:
            return fn
        with self._lock:
            if device in self._functions:
                return self._functions[device]
            cuda = _driver()
            self._ensure_context(cuda, device)
            try:
                image = self.path.read_bytes()
            except OSError as e:
                raise LaunchError(f"cannot read {self.path}: {e}") from e
            module = ctypes.c_void_p()
            _check(cuda, cuda.cuModuleLoadData(ctypes.byref(module), image), f"load {self.path}")
            fn = ctypes.c_void_p()
            _check(
                cuda,
                cuda.cuModuleGetFunction(ctypes.byref(fn), module, self.name.encode()),
                f"find {self.name} in {self.path}",
            )
            if self.shared > _STATIC_SHARED_LIMIT:
                _check(
                    cuda,
                    cuda.cuFuncSetAttribute(fn, _FUNC_ATTR_MAX_DYNAMIC_SHARED, self.shared),
                    f"allow {self.shared} B of shared memory for {self.name}",
                )
            self._functions[device] = (cuda, fn)
            return self._functions[device]

    @staticmethod
    def _ensure_context(cuda, device: int) -> None:
        current = ctypes.c_void_p()
        _check(cuda, cuda.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent")
        if current.value:
            return
        dev = ctypes.c_int()
        _check(cuda, cuda.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        _check(cuda, cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "primary context")
        _check(cuda, cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def launch(self, device: int, stream: int, grid: tuple, args: tuple) -> None:
        """Launch on ``stream`` (a CUstream handle: ``torch.cuda.current_stream().cuda_stream``)
        with ``grid`` (1-3 ints; an empty grid launches nothing)."""
        gx, gy, gz = (tuple(grid) + (1, 1))[:3]
        if gx * gy * gz == 0:
            return
        cuda, fn = self._function(device)
        # every argument packed into one buffer; the driver reads each through its pointer
        packed = ctypes.create_string_buffer(struct.pack(self.format, *args, *self.scratch))
        base = ctypes.addressof(packed)
        params = self.pointers(*[base + off for off in self.offsets])
        _check(
            cuda,
            cuda.cuLaunchKernel(
                fn,
                gx,
                gy,
                gz,
                self.block,
                1,
                1,
                self.shared,
                ctypes.c_void_p(stream),
                params,
                None,
            ),
            f"launch {self.name}",
        )
