"""``coda bench``: built chains timed against cuBLAS speed of light and unfused baselines.

The modules:

* ``command``   -- what the CLI's arguments mean: timing mode or results mode, outputs, exit codes;
* ``driver``    -- per chain and shape: dims, inputs, candidates, agreement check, timing; needs
  a CUDA GPU and a build, never compiles coda kernels;
* ``baselines`` -- the baseline contract and the ``equivalent_to`` fallback; the catalogue's own
  baselines (eager PyTorch, one function per bundled chain; Liger Kernel where it has the op)
  live in the repository's ``benchmarks/baselines/``, loaded from the checkout;
* ``timing``    -- interleaved rounds, L2 flush, median and p20/p80 (a ``Clock`` seam for tests);
* ``roofline``  -- GEMM flops, minimum bytes, speed of light, from a manifest;
* ``report``    -- terminal table, CSV, comparison, charts, all from ``model`` values;
* ``model``     -- the frozen values of a run and their JSON form; the derived figures.

Contract: every figure a report shows is either a measured time or computed by
``model.derived`` from measured times, the manifest's work and the device's measured peaks.
Nothing here asserts a speed; docs/benchmarks.md shows what a run measured.
"""
