"""Lowering: spec IR -> a real, readable Python module of QuACK ``@gemm_epilogue`` functions.

Layer map
---------
* ``lower/emit.py``   — walks each GEMM kernel's epilogue and asks every item's primitive for
  its ``lower`` (source text plus declared resources: fn parameters with their QuACK op kind,
  aux stores, reductions, the D/C bindings). Pure text: imports neither quack nor cutlass nor
  torch, so golden tests of generated code run anywhere.
* ``lower/module.py`` — assembles ``kernel.py`` (banner, imports, helpers, one decorated fn per
  kernel, each statement under a comment naming its spec line) and ``lowered.json`` (how to call
  each fn: operand roles, shapes, dtypes, runtime transforms).
* ``lower/quack_adapter.py`` — the ONLY module that imports quack/cutlass: GPU-blind compile of
  a generated module for sm_90a and export of each kernel to an object file. It runs in worker
  subprocesses (``python -m coda_spec.lower.quack_adapter``), one per kernel batch.
* ``lower/quack_ops/`` — coda's own QuACK epilogue ops (``GroupStat``: per-(row, group)
  statistics of the accumulator prepass). Imports quack/cutlass, but only the generated
  ``kernel.py`` imports it, so it too is loaded only inside compile workers.

The contract with QuACK (0.6.5) that this package relies on is documented at the top of
``emit.py``: fn operands are pinned with ``ops=`` (never shape inference); pairing modes are
``acc_pair`` (adjacent accumulator columns, gated/rotary) and ``packed_cd_b16x2`` (16-bit C/D
pairs at twice GEMM-N, dgated); reductions write per-tile partials, except per-(row, group)
statistics, which QuACK's accumulator prepass folds completely inside the tile.
"""
