"""``PairF8Store``: an fp8 half-width (gated) output of an ``acc_pair`` kernel on sm90.

An fp8 value is a quarter of the pair's fp32 register, so the fp32 trick of ``PairF32Store``
(the half-width tile's bytes ARE a full-width 16-bit tile) has no fp8 form: an (M, N/2) fp8 row
is N/2 bytes, a quarter of the full-width 16-bit row, and the four fp8 values of four adjacent
pairs sit in four lanes of a quad (the sm90 accumulator gives a thread two adjacent columns,
i.e. one gate/up pair, per 8 columns). What stores them is QuACK's own gated store with a
narrow element, which QuACK 0.6.5 already has on sm90 except for one assert:

* the geometry: on sm90 ``TileStore._make_tiled_copy_r2s`` lays the store's atom over D's
  register-to-shared tiled copy (the 16-bit STSM C-atom's thread/value layout), and
  ``copy_utils.get_smem_store_atom`` degrades an 8-bit element to a universal 16-bit copy (two
  adjacent fp8 values, ``st.shared.b16``): the same pairing of a narrow universal atom with the
  STSM C-atom geometry that QuACK's sm90 fp8 **D** store uses (``hopper_helpers.
  get_smem_store_op`` over ``epilog_smem_copy_atom``), on the halved epi tile of the gated
  16-bit store;
* the placement: ``TileStore.store_convert`` applies, for a gated output narrower than 16 bits
  on sm90 and sm120, the 16-bit store's quad permute at fp32 granularity before the convert
  (``layout_utils.permute_gated_Cregs_f32``: the movement is dtype-independent), so each fp8
  value lands where the 16-bit gated store puts the same value; the convert is
  ``cvt.rn.satfinite`` (round to nearest even, saturating at the format's largest finite value);
* the smem stage and the TMA store are ``setup_epi_tensor`` of the fp8 tensor on the halved
  epi tile (``tile_N % 32 == 0``, so epi_N / 2 >= 16 fp8 = one 16-byte TMA row).

``TileStore.to_params`` refuses it only by asserting 16 bits for a gated store on sm90 ("SM90's
STSM path remains 16-bit only"); this op is ``TileStore(name, gated=True)`` with ``to_params``
re-stated for an 8-bit element on sm90 (the gated asserts kept: n-major D and output, tile_N %
32). Everything else is QuACK's: the paired visit hands it the half-width fragment, the frontend
accepts an (M, N/2) fp8 ``acc_pair`` output (``acc_pair auxiliary output must be 16-bit (or
fp8/fp4)``), the host argument is the fp8 tensor itself (no transform). sm90 only (coda builds
for sm_90a); ``tests/gpu/test_pair_f8_gpu.py`` checks the bytes on the H200.
"""

from __future__ import annotations

from quack.epilogue.ops import TileStore

from coda_spec.lower.quack_ops.pair_f32 import tile_store_params


class PairF8Store(TileStore):
    """A half-width fp8 output of an acc_pair kernel: QuACK's gated store, 8-bit on sm90."""

    def __init__(self, name: str):
        super().__init__(name, gated=True)

    def config_key(self):
        return ("pair_f8", *super().config_key())

    def to_params(self, gemm, args):
        tensor = getattr(args, self.name)
        assert gemm.arch == 90, "PairF8Store is sm90's fp8 acc_pair output"
        assert tensor.element_type.width == 8, "PairF8Store stores fp8"
        assert gemm.d_layout is None or gemm.d_layout.is_n_major_c()
        assert gemm.cta_tile_shape_mnk[1] % 32 == 0, "gated epilogue on sm90 needs tile_N % 32"
        return tile_store_params(self, gemm, tensor, self.epi_tile_fn(gemm, gemm.epi_tile))

    def __repr__(self):
        return f"PairF8Store({self.name!r})"
