"""coda: a declarative fusion-spec compiler for GEMM epilogues on Hopper (sm_90a).

The layer map has one home: the import contract in ``pyproject.toml`` (``[tool.importlinter]``,
checked in CI), drawn in docs/architecture.md, "Layers" (``tests/test_docs.py`` checks that the
two agree); a module's docstring points there rather than restating it.

``import coda_spec`` is cheap: it imports neither torch nor cutlass/quack. ``coda_spec.load``
(the runtime, ``coda_spec.runtime``) needs torch, tvm_ffi and libcute_dsl_runtime.so, never the
compiler.
"""

__version__ = "0.1.0"


def load(directory, tuned=None):
    """Load a build directory for calling (see ``coda_spec.runtime``; imports torch lazily).
    ``tuned``: the tune table to pick kernel variants from (None: ``$CODA_TUNED``, else
    ``./tuned/*.json``; docs/tuning.md)."""
    from coda_spec.runtime import load as _load

    return _load(directory, tuned=tuned)


def op(build, tuned=None, dims=None, fuse_grad_accum=False):
    """A built chain as a torch op with autograd (``coda_spec.ops.op``; docs/training.md).
    ``dims``: ``{name: size}`` for some static dims, to run the build re-sized there (nothing
    compiled; a size it cannot serve is refused, naming the ``coda build`` that would).
    ``fuse_grad_accum``: eager backwards add weight gradients into ``.grad`` in place."""
    from coda_spec.ops import op as _op

    return _op(build, tuned=tuned, dims=dims, fuse_grad_accum=fuse_grad_accum)
