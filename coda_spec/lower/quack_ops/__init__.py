"""coda's own QuACK epilogue ops (imports cutlass and quack).

Imported only by a generated ``kernel.py`` (its preamble) and therefore only inside the compile
workers (``coda_spec.lower.quack_adapter``); nothing else in coda imports this package, so the
front end, the lowering and the runtime stay free of cutlass and quack.

* :class:`GroupStat` — a per-(row, group of columns) statistic folded by QuACK's accumulator
  prepass (``prepass=fn2, prepass_outs=(name,)``): lowers ``prepass`` items and grouped
  (per-head) ``reduce_row`` items.
* :class:`HalfPartner` — rotate-half RoPE's partner value ``rotate_half(x)`` (columns hd/2
  apart, Hugging Face's layout), from a per-thread register stash the accumulator prepass fills:
  lowers ``rope``/``rope_bwd`` with ``pairs: half``.
* :class:`PairF32Store` — an fp32 half-width output of an ``acc_pair`` kernel (QuACK 0.6.5's
  gated store is 16-bit on sm90), stored bit-exactly as the full-width 16-bit tile its bytes are.
* :class:`PairF8Store` — an fp8 half-width output of an ``acc_pair`` kernel: QuACK's gated
  store with an 8-bit element on sm90 (its narrow path, which QuACK 0.6.5 asserts away on sm90).
"""

from coda_spec.lower.quack_ops.group_stat import GroupStat
from coda_spec.lower.quack_ops.half_partner import HalfPartner
from coda_spec.lower.quack_ops.pair_f8 import PairF8Store
from coda_spec.lower.quack_ops.pair_f32 import PairF32Store

__all__ = ["GroupStat", "HalfPartner", "PairF32Store", "PairF8Store"]
