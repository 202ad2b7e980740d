"""The front end: a spec file checked into typed, frozen values (``coda check``).

Stages ``load`` (``source``), ``validate``, ``normalize`` and ``analyze`` (``analyze`` and the
modules it drives: ``facts``, ``steps``, ``gemm``, ``order``, ``writes``, ``lowering``,
``programs``), run in order by ``frontend``; ``suits`` sizes a spec's kernels against a config,
``target`` resolves a command's target to its build. Where this package sits among the others:
docs/architecture.md.
"""
