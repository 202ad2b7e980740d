"""Lowering: spec IR -> a real, readable Python module of QuACK ``@gemm_epilogue`` functions.

Layer map (imports one way: module -> emit -> primitives -> lower_api; ``tests/test_lower_api.py``)
----------------------------------------------------------------------------------------------
* ``coda_spec/primitives/lower_api.py`` (outside this package, on the primitives' floor) — the
  lowering API
  every primitive's ``lower(lc, op)`` uses: ``LowerCtx`` (values, text, and resource methods that
  declare fn operands, D/C bindings, aux stores, sinks, shared ops and the names the text
  imports), ``Field``; the QuACK contract. ``coda_spec/primitives/host_api.py`` is its sibling for a
  primitive's ``host`` (``HostCtx``). Neither imports a primitive, the walk or a compiler.
* ``lower/emit.py``   — the walk over one GEMM kernel's epilogue: asks each item's primitive for
  its ``lower``, then reads what the items declared and assembles the decorated fn (and its
  prepass fn). Pure text: imports neither quack nor cutlass nor torch, so golden tests of
  generated code run anywhere.
* ``lower/module.py`` — assembles ``kernel.py`` (banner, the import block of exactly the declared
  names, one decorated fn per kernel, each statement under a comment naming its spec line) and
  ``lowered.json`` (how to call each fn: operand roles, shapes, dtypes, runtime transforms). A
  host-only spec has no GEMM kernel and gets no kernel.py.
* ``lower/quack_adapter.py`` — GPU-blind compile of a generated module for sm_90a and export of
  each kernel to an object file, in worker subprocesses (``python -m
  coda_spec.lower.quack_adapter``), one per kernel batch; the compile driver, the only module
  of coda's own code path that imports quack/cutlass.
* Imported only by generated code (so only inside compile workers): ``lower/kernel_lib.py``
  (lane-wise helpers over QuACK ``Pair`` values), ``lower/quack_ops/`` (coda's own QuACK
  epilogue ops: ``GroupStat``, per-(row, group) statistics of the accumulator prepass) and
  ``lower/quack_private.py`` (the one home of QuACK's private names, under coda names; the
  compile driver takes its sm90 hook names too).
* Host steps and finalizes: ``lower/host_kernel.py``, ``lower/finalize_kernel.py`` (Triton text)
  and ``lower/triton_aot.py`` (their sm_90a cubins).
"""
