"""coda: a declarative fusion-spec compiler for GEMM epilogues on Hopper (sm_90a).

Layer map (dependencies point down only):

    cli
    frontend (load -> validate -> normalize -> analyze)   reference / equivalence / inputs (torch)
    source, validate, normalize, analyze, expr, schema
    ir, primitives (registry, one file each), dims, errors

``import coda_spec`` is cheap: it imports neither torch nor cutlass/quack.
"""

__version__ = "0.1.0"


def load(directory):
    """Load a build directory for calling (see ``coda_spec.runtime``; imports torch lazily)."""
    from coda_spec.runtime import load as _load

    return _load(directory)
