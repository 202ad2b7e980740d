"""Counter-based random numbers: Philox4x32-10, one uniform in [0, 1) per element of a tile.

Definition (the one every lowering and the reference share, bit for bit)
-----------------------------------------------------------------------
For an element at global row ``m`` and column ``n`` of an ``[M, N]`` tile, with a 64-bit
``seed`` and a 64-bit ``offset`` (int64 device scalars, so a training loop changes them per
step without a rebuild):

* the counter is ``c = (offset + m * N + n) mod 2^64`` (two's complement int64 arithmetic);
* Philox4x32 runs 10 rounds on the counter words ``(c0, c1, c2, c3) = (c mod 2^32, c >> 32,
  0, 0)`` with the key ``(k0, k1) = (seed mod 2^32, (seed >> 32) mod 2^32)`` (Salmon et al.,
  SC'11; the multipliers ``0xD2511F53`` / ``0xCD9E8D57`` and Weyl increments ``0x9E3779B9`` /
  ``0xBB67AE85``). A round is ``c0' = hi(B c2) ^ c1 ^ k0``, ``c2' = hi(A c0) ^ c3 ^ k1``,
  ``c1' = lo(B c2)``, ``c3' = lo(A c0)``, then ``k0 += 0x9E3779B9``, ``k1 += 0xBB67AE85``
  (all mod 2^32), ``hi``/``lo`` the two 32-bit halves of the 64-bit product;
* the random word is the first output word ``r = c0`` after the 10 rounds. This is exactly
  Triton's ``tl.randint(seed, c)`` for an int64 ``c`` (``triton/language/random.py``: its
  ``randint4x`` splits a 64-bit offset into ``(lo, hi, 0, 0)`` and the seed into ``(lo, hi)``);
  the host (Triton) lowering calls it;
* the uniform is ``u = (r >> 8) * 2^-24``: the top 24 bits as a multiple of 2^-24, so
  ``0 <= u <= 1 - 2^-24`` and ``u`` is EXACT in fp32 and fp64 (no conversion rounding, unlike
  Triton's ``tl.rand``, which scales a 31-bit integer and rounds). ``u >= p`` therefore means
  the same thing in the kernels and in the fp64 reference.

Why a counter-based generator: the backward pass regenerates a dropout mask from the same
``(seed, offset)`` instead of saving it (FlashAttention's dropout, Triton's tutorial "low-memory
dropout"); any tiling computes any element's number independently.

This module holds the torch reference (``uniform``: int64 tensors, every operation masked to
32 bits, so it runs on the CPU bit-identically) and the constants the lowerings write. It
imports torch only inside its functions.
"""

from __future__ import annotations

ROUNDS = 10
MUL_A = 0xD2511F53  # multiplies c0
MUL_B = 0xCD9E8D57  # multiplies c2
KEY_A = 0x9E3779B9  # added to k0 per round
KEY_B = 0xBB67AE85  # added to k1 per round
MASK32 = 0xFFFFFFFF
UNIFORM_SHIFT = 8  # r >> 8: the top 24 bits
UNIFORM_SCALE = 2.0**-24


def _mul32(a, b: int):
    """(hi, lo) 32-bit halves of ``a * b`` (``a`` an int64 tensor of values below 2^32, ``b`` a
    32-bit constant), from 16-bit limbs so that no int64 product overflows."""
    a0, a1 = a & 0xFFFF, a >> 16
    b0, b1 = b & 0xFFFF, b >> 16
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> 16) + (p01 & 0xFFFF) + (p10 & 0xFFFF)
    lo = ((mid & 0xFFFF) << 16) | (p00 & 0xFFFF)
    hi = p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16)
    return hi & MASK32, lo & MASK32


def words(seed: int, counter):
    """The Philox4x32-10 word ``r`` (int64 tensor of values in [0, 2^32)) for an int64
    ``counter`` tensor and a Python int ``seed`` (both read as 64-bit two's complement)."""
    import torch

    c = counter.to(torch.int64)
    c0, c1 = c & MASK32, (c >> 32) & MASK32
    c2 = torch.zeros_like(c0)
    c3 = torch.zeros_like(c0)
    k0, k1 = seed & MASK32, (seed >> 32) & MASK32
    for _ in range(ROUNDS):
        hi_b, lo_b = _mul32(c2, MUL_B)
        hi_a, lo_a = _mul32(c0, MUL_A)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + KEY_A) & MASK32, (k1 + KEY_B) & MASK32
    return c0


def counters(offset: int, rows: int, cols: int, device=None):
    """The ``[rows, cols]`` int64 counters ``offset + m * cols + n`` (wrapping mod 2^64)."""
    import torch

    m = torch.arange(rows, dtype=torch.int64, device=device).reshape(-1, 1)
    n = torch.arange(cols, dtype=torch.int64, device=device).reshape(1, -1)
    return m * cols + n + _wrap64(offset)


def uniform(seed: int, offset: int, rows: int, cols: int, dtype=None, device=None):
    """The ``[rows, cols]`` uniforms ``u = (r >> 8) * 2^-24`` (module doc), in ``dtype``
    (default fp64; exact in any float of 24 or more mantissa bits)."""
    import torch

    r = words(_wrap64(seed), counters(offset, rows, cols, device))
    return (r >> UNIFORM_SHIFT).to(dtype or torch.float64) * UNIFORM_SCALE


def scalar_int(t) -> int:
    """A seed or offset as a Python int: an int, or a one-element integer tensor."""
    if hasattr(t, "reshape"):
        return int(t.reshape(-1)[0].item())
    return int(t)


def _wrap64(v: int) -> int:
    """``v`` as a signed 64-bit value (so int64 tensor arithmetic takes it)."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v
