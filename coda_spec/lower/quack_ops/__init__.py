"""coda's own QuACK epilogue ops (imports cutlass and quack).

Imported only by a generated ``kernel.py`` (its preamble) and therefore only inside the compile
workers (``coda_spec.lower.quack_adapter``); nothing else in coda imports this package, so the
front end, the lowering and the runtime stay free of cutlass and quack.

* :class:`GroupStat` — a per-(row, group of columns) statistic folded by QuACK's accumulator
  prepass (``prepass=fn2, prepass_outs=(name,)``): lowers ``prepass`` items and grouped
  (per-head) ``reduce_row`` items.
"""

from coda_spec.lower.quack_ops.group_stat import GroupStat

__all__ = ["GroupStat"]
