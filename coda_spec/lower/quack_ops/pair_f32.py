"""``PairF32Store``: an fp32 half-width (gated) output of an ``acc_pair`` kernel on sm90.

QuACK 0.6.5 stores an ``acc_pair`` kernel's half-width aux tile through its gated STSM path,
which is 16-bit only on sm90 (``TileStore.to_params`` asserts it, and the EpiMod frontend
refuses the host tensor first: ``acc_pair auxiliary output must be 16-bit (or fp8/fp4)``).

An fp32 half-width value needs no gated path at all, because its bytes ARE a full-width 16-bit
tile: the (M, N/2) fp32 output viewed as (M, N) 16-bit (``torch.Tensor.view(torch.bfloat16)``)
puts fp32 column j at 16-bit columns (2j, 2j+1), low half first (little-endian), and the epilogue
fn's value for pair j comes from accumulator lanes (2j, 2j+1) of the same thread (QuACK's paired
visit: ``flat_divide(tRS_rD, 2)``). So the pair's fp32 register, recast (no conversion) to two
16-bit lanes, holds exactly the two 16-bit values a full-width 16-bit tile store writes to those
two columns. This op is that store: QuACK's ordinary full-width 16-bit ``TileStore`` path (the
epi tile, the STSM atom, the TMA store of the D-sized tile), fed by a bit-cast instead of a
rounding convert. The values are stored bit-exactly; nothing is rounded.

Host side: the frontend validates an ``acc_pair`` output as an (M, N/2) 16-bit tensor, so the
compile passes one (its values never matter: the compiled argument is built from
:meth:`host_fake_arg`, which makes it (M, N) 16-bit with GEMM N's symbol); at run time the
runtime passes the fp32 buffer's (M, N) bfloat16 view (``Field.transform == "f32_bits"``).

The op keeps ``gated = True`` (the frontend requires it of an ``acc_pair`` output, and the paired
visit hands it the half-width fragment) and overrides what ``gated`` changes in TileStore's
device path: the halved epi tile, the halved tile shape of the TMA partition, the 16-bit
assertion and the gated register permute. sm90 only (coda builds for sm_90a).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from quack.epilogue.ops import TileStore, setup_epi_tensor

# The 16-bit type the fp32 bits travel as (any 16-bit type works: nothing converts them).
CARRIER = cutlass.BFloat16


def tile_store_params(op: TileStore, gemm, tensor, epi_tile) -> dict:
    """``TileStore.to_params`` after its gated asserts (n-major, the dtype and layout stashed on
    ``gemm``, the TMA atom and staged smem of ``epi_tile``, None: the kernel's own)."""
    layout = cutlass.utils.LayoutEnum.from_tensor(tensor)
    assert layout.is_n_major_c()
    setattr(gemm, op._layout_gemm_attr(), layout)
    setattr(gemm, op._dtype_gemm_attr(), tensor.element_type)
    tma_atom, tma_tensor, smem_layout, epi_tile_out = setup_epi_tensor(
        gemm, tensor, epi_tile=epi_tile
    )
    return {
        op._tma_atom_key(): tma_atom,
        op.name: tma_tensor,
        op._smem_layout_key(): smem_layout,
        op._epi_tile_key(): epi_tile_out,
        op._dtype_field(): tensor.element_type,
    }


class PairF32Store(TileStore):
    """A half-width fp32 output of an acc_pair kernel, stored as its full-width 16-bit bytes."""

    def __init__(self, name: str):
        super().__init__(name, gated=True)
        self.epi_tile_fn = None  # the full-width tile: no halved epi tile

    def config_key(self):
        return ("pair_f32", *super().config_key())

    def to_params(self, gemm, args):
        tensor = getattr(args, self.name)
        assert gemm.arch == 90, "PairF32Store is sm90's fp32 acc_pair output"
        assert tensor.element_type.width == 16, "PairF32Store stores its fp32 bits as 16-bit"
        return tile_store_params(self, gemm, tensor, None)

    def store_setup(
        self,
        gemm,
        params,
        smem_tensor,
        tiled_copy_r2s,
        tiled_copy_t2r,
        tile_coord_mnkl,
        varlen_manager,
        tidx,
    ):
        # TileStore.store_setup with the full CTA tile (the 16-bit view is as wide as D)
        tiled_copy_aux_r2s = self._make_tiled_copy_r2s(gemm, params, tiled_copy_r2s, tiled_copy_t2r)
        tRS_sAux = tiled_copy_aux_r2s.get_slice(tidx).partition_D(smem_tensor)
        copy_aux, _, _ = gemm.epilog_gmem_copy_and_partition(
            getattr(params, self._tma_atom_key()),
            varlen_manager.offset_batch_epi(getattr(params, self.name), tile_coord_mnkl[3]),
            gemm.cta_tile_shape_mnk[:2],
            getattr(params, self._epi_tile_key()),
            smem_tensor,
            tile_coord_mnkl,
        )
        pred = self.store_pred_fn(gemm, tile_coord_mnkl) if self.store_pred_fn else None
        return (tiled_copy_aux_r2s, tRS_sAux, copy_aux, pred)

    @cute.jit
    def store_convert(
        self, gemm, tRS_rAuxOut, sr_seed, tidx, tile_coord_mnkl, num_prev_subtiles, epi_idx
    ):
        # The half-width fp32 fragment (one value per accumulator pair), bit-cast to the
        # full-width 16-bit fragment: pair j's register is lanes (2j, 2j+1).
        return cute.recast_tensor(tRS_rAuxOut, getattr(gemm, self._dtype_gemm_attr()))

    def __repr__(self):
        return f"PairF32Store({self.name!r})"
