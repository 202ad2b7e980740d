"""Lowering: spec IR -> a real, readable Python module of QuACK ``@gemm_epilogue`` functions,
and the host steps' and finalizes' Triton kernels, compiled for sm_90a without a GPU.

The package runs the primitives: the walk over one GEMM kernel's epilogue (``emit``: each item's
primitive's ``lower``, against ``coda_spec.primitives.lower_api``), ``kernel.py`` and
``lowered.json`` (``module``), the host and finalize kernels (``host_kernel``,
``finalize_kernel``: Triton text) and their cubins (``triton_aot``), the compile driver
(``quack_adapter``), the SASS checks (``sass``) and what build's lower stage refuses
(``dry_run``). The two contracts primitives lower against live with the primitives, below this
package (``tests/test_lower_api.py``).

* Generation is pure text: ``emit``, ``module``, ``host_kernel`` and ``finalize_kernel`` import
  neither quack, cutlass, triton nor torch, so golden tests of generated code run anywhere.
* ``quack_adapter`` compiles in worker subprocesses (``python -m coda_spec.lower.quack_adapter``),
  one per kernel batch; it is the only module of coda's own code path that imports quack or
  cutlass.
* Imported only by generated code (so only inside compile workers): ``kernel_lib`` (lane-wise
  helpers over QuACK ``Pair`` values), ``quack_ops/`` (coda's own QuACK epilogue ops:
  ``GroupStat``, per-(row, group) statistics of the accumulator prepass) and ``quack_private``
  (the one home of QuACK's private names, under coda names; the compile driver takes its sm90
  hook names too).

Where this sits: docs/architecture.md, Layers.
"""
