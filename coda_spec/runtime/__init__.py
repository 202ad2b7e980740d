"""Load a built chain and call it with torch CUDA tensors. Imports no compiler and no front end.

    chain = coda_spec.load("build/rmsnorm_chain-latest")
    out = chain(y=y, w_o=w_o, x=x, gamma=gamma, w_up=w_up)   # {"x1": ..., "r": ..., "out": ...}

docs/runtime.md is the user's guide. The package reads ``manifest.json`` once into the typed
records of ``coda_spec.artifact`` (every shape an expression over the spec's dims, evaluated at
the manifest's ``dims`` and the dynamic dim the inputs bind) and imports neither cutlass, quack,
Triton, yaml, jsonschema, the spec front end, the lowering, the primitive registry nor the
reference interpreter (a test checks it); ``Chain.checked()`` loads the spec for verify, bench
and tune, never for a call. Its modules, each a role, pointing down this list:

``chain``   the public :class:`Chain` and :func:`load`
``launch``  launching a step: QuACK's GEMM call ABI (named once), fields, compiled cubins
``call``    one call's state and the loop over its steps (NVTX and profiler ranges)
``checks``  what a call checks before its first launch
``plan``    what no call changes: variants, tune picks, saved names, extents, re-sizing
``cubin``   the CUDA driver: loading and launching a cubin

What a call does: validates every input (and gradient) before any launch (``checks``); runs the
steps in order, each named ``<chain>/<step> (<spec file>:<line>)`` in NVTX and the profiler;
returns the declared outputs. ``add_to`` outputs are written IN PLACE into the tensor they
accumulate into (QuACK's add_to_output), which is returned under the output's name.
:meth:`Chain.backward` runs the backward steps alone on a forward's saved tensors; with
``accumulate={gradient: tensor}`` a weight gradient of :attr:`Chain.accumulable` is added into
that tensor in place by its step's accumulating kernel (a ``.grad``: gradient accumulation).

Refusals. Every refused call raises :class:`CodaRuntimeError` (a missing CUDA device, a GPU that
is not sm_90, a bad input or gradient, an artifact that cannot be loaded) before the first
launch, so a refused call changes nothing. The one exception would be a kernel whose compiled
argument check rejects what validation passed (a coda bug): re-raised as a
``CodaRuntimeError`` naming the kernel, after earlier steps of that call ran.

Empty calls (the dynamic dim bound to 0) are valid; what launches and what is only allocated is
``launch``'s docstring. At M = 0 forward outputs and per-row tensors are empty; gradients of
weights and of row vectors have their full shape and are zero; ``add_to`` outputs are the tensor
they accumulate into, unchanged. A reduction over nothing has one value everywhere, the table in
``coda_spec.finalize``.

Variants: ``plan``'s docstring holds the rule; the tune table is read and filtered to this build
and these static dims once, at load (a malformed file is a ValueError naming it); tune files
found with no entry for this build are reported once, at load, with a warning naming
``coda tune``; entries measured on another GPU are not used, with a warning naming both.
"""

from coda_spec.runtime.chain import Chain, load
from coda_spec.runtime.plan import CodaRuntimeError

__all__ = ["Chain", "CodaRuntimeError", "load"]
