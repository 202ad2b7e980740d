"""The cubin/SASS helpers the build tests use live in the package (the build's spill check uses
them too): ``coda_spec.lower.sass``."""

from coda_spec.lower.sass import arch_of, cubins, nvdisasm_path, opcodes  # noqa: F401
