"""The one home of QuACK's private (``_``-prefixed) names that coda relies on, under coda names.

Generated ``kernel.py`` files import the functions below; the compile driver
(``lower/quack_adapter.py``) takes the sm90 hook names. No other coda module, and no generated
code, may name a private QuACK attribute: ``tests/test_quack_private.py`` scans coda's sources
and the golden kernels for that, and pins every entry of :data:`PRIVATE` to the QuACK source it
was checked against, so a QuACK upgrade that renames or changes one fails there, not inside a
compiled kernel or a silently different tile rule.

This module imports quack only inside its functions: the compile driver imports it before it
sets the target architecture (which must happen before cutlass is first imported).

Why private names at all:

* :func:`angle_turns` / :func:`sincos_turns` — QuACK's float-float, turns-domain RoPE angle
  (exact range reduction for large positions), what its own ``rope_posfreq_epi`` mod uses; QuACK
  0.6.5 has no public spelling of it, and re-implementing it would fork subtle numerics.
  ``angle_turns(pos, freq) -> (t, lo)``: pos * freq in turns as an unevaluated float-float sum,
  ``freq`` a ``Pair`` (hi, lo) of the frequency over 2 pi (the runtime's ``turns_table``
  transform builds it); ``sincos_turns(t, lo) -> (sin, cos)``.
* :data:`SM90_TILE_SHAPE_HOOK` / :data:`SM90_STAGES_HOOK` — the class-level rules of QuACK's sm90
  GEMM that pick the epilogue subtile and the smem stage split; coda's epilogue knobs
  (``epi_n``, ``c_stages``) override them for one compile (QuACK has no argument for either).
"""

from __future__ import annotations

SM90_TILE_SHAPE_HOOK = "_compute_tile_shape_or_override"
SM90_STAGES_HOOK = "_compute_stages"

# (coda name, QuACK module, QuACK private attribute path): the whole private surface coda uses.
PRIVATE = (
    ("angle_turns", "quack.epilogue.rotary", "_angle_turns"),
    ("sincos_turns", "quack.epilogue.rotary", "_sincos_turns"),
    ("SM90_TILE_SHAPE_HOOK", "quack.gemm_sm90", f"GemmSm90.{SM90_TILE_SHAPE_HOOK}"),
    ("SM90_STAGES_HOOK", "quack.gemm_sm90", f"GemmSm90.{SM90_STAGES_HOOK}"),
)


def angle_turns(pos, freq):
    """QuACK's ``rotary._angle_turns``: the angle ``pos * freq`` in turns, as (t, lo)."""
    from quack.epilogue import rotary

    return rotary._angle_turns(pos, freq)


def sincos_turns(t, lo):
    """QuACK's ``rotary._sincos_turns``: (sin, cos) of the float-float angle t + lo turns."""
    from quack.epilogue import rotary

    return rotary._sincos_turns(t, lo)
