"""Launch ahead-of-time cubins (host steps, finalizes) through the CUDA driver. Runtime side.

The build compiles host steps and finalizes to sm_90a cubins (``coda_spec.lower.triton_aot``);
this module loads one with ``cuModuleLoadData`` and launches it with ``cuLaunchKernel`` on
torch's current stream, so deployment needs only ``libcuda`` -- no Triton, no compiler. A launch
on a capturing stream is recorded into the CUDA graph like any other kernel.

Contract: :class:`Cubin` takes a manifest ``launch`` entry (see ``triton_aot``) and the build
directory; :meth:`Cubin.launch` takes the grid and the explicit arguments (device pointers as
ints for ``*`` types, ints for ``i32``, floats for ``fp32``) in the entry's order. The module is
loaded once per device, at its first launch there (the driver needs a context: torch's primary
context, made current on this thread if it is not).
"""

from __future__ import annotations

import ctypes
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


def _ctype(kind: str):
    if kind.startswith("*"):
        return ctypes.c_uint64
    if kind == "i32":
        return ctypes.c_int32
    if kind == "i64":
        return ctypes.c_int64
    if kind == "fp32":
        return ctypes.c_float
    raise LaunchError(f"unsupported kernel parameter type {kind!r}")


class Cubin:
    """One compiled kernel, loaded lazily per device."""

    def __init__(self, directory: Path, entry: dict):
        self.path = Path(directory) / entry["cubin"]
        self.name = entry["name"]
        self.block = 32 * int(entry["num_warps"])
        self.shared = int(entry["shared"])
        self.ctypes = tuple(_ctype(t) for t in entry["types"])
        self.hidden = int(entry.get("hidden", 0))
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
        values = [c(v) for c, v in zip(self.ctypes, args, strict=True)]
        values += [ctypes.c_uint64(0)] * self.hidden
        params = (ctypes.c_void_p * len(values))(
            *[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values]
        )
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
