"""coda: a declarative fusion-spec compiler for GEMM epilogues on Hopper (sm_90a).

Layer map (dependencies point down only):

    cli
    build (lower -> compile -> link -> manifest)    verify    bench (timing, baselines, report)
    lower/ (text)  lower/quack_adapter.py (the ONLY quack/cutlass import, in worker processes)
    frontend (load -> validate -> normalize -> analyze)   reference, equivalence, inputs   runtime
    source, validate, normalize, analyze, expr, schema, artifact (manifest format), config
    ir, primitives (registry, one file each), dims, errors

``import coda_spec`` is cheap: it imports neither torch nor cutlass/quack. ``coda_spec.load``
(the runtime) needs torch, tvm_ffi and libcute_dsl_runtime.so, never the compiler.
"""

__version__ = "0.1.0"


def load(directory, tuned=None):
    """Load a build directory for calling (see ``coda_spec.runtime``; imports torch lazily).
    ``tuned``: the tune table to pick kernel variants from (None: ``$CODA_TUNED``, else
    ``./tuned/*.json``; see ``coda_spec.tune``)."""
    from coda_spec.runtime import load as _load

    return _load(directory, tuned=tuned)
