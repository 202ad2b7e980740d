"""``coda verify``: built kernels against the spec's reference math, on the GPU.

``run`` is the protocol (the cases, the pass rule, the runs; its docstring and
docs/verification.md tell it), ``report`` the reports it returns and how they print, ``sanitize``
compute-sanitizer's memcheck of the small case. Where this package sits: docs/architecture.md.
"""
