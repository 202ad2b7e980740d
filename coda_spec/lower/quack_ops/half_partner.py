"""``HalfPartner``: rotate-half RoPE's partner value, ``rotate_half(x)``, in a GEMM epilogue.

Hugging Face's rotate-half layout pairs column j of a head with column j + hd/2 (hd the head
size): ``rope(x) = x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x2, x1)`` per
head. QuACK 0.6.5's epilogue fn sees one element or one adjacent column pair, never columns hd/2
apart, so this op hands the fn ``rotate_half(x)`` as a value operand, and the rotation is plain
elementwise math in the fn (``coda_spec.primitives._pairs.half_lower``).

Where the partner comes from (sm90, registers only, no shuffle, no shared memory):

* the epilogue visits the CTA tile in subtiles of ``epi_tile`` (QuACK's ``epi_tile_shape``), and
  every subtile is partitioned over the epilogue threads the same way
  (``tRS_rAcc[None, None, None, epi_coord]``), so register i of a thread's fragment sits at the
  same (row, column) offset inside every subtile;
* with ``tile_N % hd == 0`` the tile holds whole heads, and with ``epi_N`` dividing ``hd / 2``
  each subtile lies in one half of one head, and the subtile ``hd / 2`` columns away (same epi
  row) holds the partner of every element, in the SAME thread's register i.

The op is a prepass sink and a value port (the shape of QuACK's ``GroupedColStatsBase``): the
kernel's prepass fn returns the rotated value x per element (re-computed from the raw
accumulator: the prepass runs before any subtile is stored), :meth:`fn_sink_flush` keeps each
subtile's fragment in a per-thread register stash (the whole tile's x: tile_M * tile_N / threads
fp32 registers), and in the main pass :meth:`fn_prepare` returns the partner subtile's fragment,
negated for the first half of a head. ``begin`` refuses (at trace time, naming the sizes) a
config that breaks either condition; ``coda check``/``coda build`` refuse them first
(``_pairs.half_supports``).

Host argument (the GroupStat schema, role ``group_stat`` in the manifest): the head size as a
plain ``int`` at compile time (a constexpr), ``None`` in its EpilogueArguments slot at run time.
"""

from __future__ import annotations

from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Float32, const_expr
from quack.epilogue.ops import EpiOp


class HalfPartner(EpiOp):
    """``rotate_half(x)`` per element of the accumulator tile, x given by the prepass fn."""

    fn_port = "value"

    # -- host schema: the head size, baked in (GroupStat's int form) --------------------------
    def host_arg_key(self, value):
        return ("width", int(value))

    def host_fake_arg(self, key, fctx):
        return key[1]

    def host_call_arg(self, value, key):
        return None

    def host_validate(self, value, *, n, tile_N, **_):
        if not isinstance(value, int) or value <= 0 or value % 2:
            raise ValueError(f"'{self.name}': the head size must be a positive even int")
        if n % value or tile_N % value:
            raise ValueError(
                f"'{self.name}': head size {value} must divide N={n} and tile_N={tile_N}"
            )

    def param_fields(self):
        return [(self.name, object, None)]

    def arg_spec_type(self, const=False):
        # typing.Optional, as QuACK's own ops annotate (its converter reads the hint)
        return cutlass.Constexpr[int] if const else Optional[cute.Tensor]  # noqa: UP045

    def host_arg_form(self, value):
        return "Const" if isinstance(value, int) else ""

    def to_params(self, gemm, args):
        return {self.name: getattr(args, self.name)}

    # -- device --------------------------------------------------------------------------------
    @cute.jit
    def begin(self, gemm, param, smem_tensor, ctx):
        head_dim = const_expr(param)
        epi_m = const_expr(cute.size(ctx.epi_tile[0]))
        epi_n = const_expr(cute.size(ctx.epi_tile[1]))
        assert ctx.tile_N % head_dim == 0, (
            f"HalfPartner: tile_N {ctx.tile_N} must be a multiple of the head size {head_dim}"
        )
        assert (head_dim // 2) % epi_n == 0, (
            f"HalfPartner: the epilogue subtile's {epi_n} columns must divide half a head "
            f"({head_dim // 2})"
        )
        shape = ctx.tRS_rD_layout.shape
        frag = const_expr(cute.size(ctx.tRS_rD_layout))
        stash = cute.make_rmem_tensor((frag, ctx.tile_M // epi_m, ctx.tile_N // epi_n), Float32)
        return (stash, shape, frag, head_dim, epi_n)

    def begin_loop(self, gemm, state, epi_coord):
        em, en = (int(c) for c in epi_coord)
        return (*state, em, en)

    def fn_sink_flush(self, gemm, state, frag):
        """Prepass: keep this subtile's x (unrolled at trace time: static register indexes)."""
        stash, _, n, _, _, em, en = state
        for i in range(n):
            stash[i, em, en] = frag[i]

    def fn_prepare(self, gemm, state, paired):
        """Main pass: the partner subtile's x, negated in the first half of a head."""
        stash, shape, n, head_dim, epi_n, em, en = state
        half = head_dim // 2
        first = (en * epi_n) % head_dim < half  # tiles start at a head boundary
        partner = en + half // epi_n if first else en - half // epi_n
        out = cute.make_rmem_tensor(shape, Float32)
        for i in range(n):
            out[i] = -stash[i, em, partner] if first else stash[i, em, partner]
        return out

    def __repr__(self):
        return f"HalfPartner({self.name!r})"
