"""The Philox4x32-10 reference (``coda_spec.philox``), the math language's ``philox_uniform`` /
``dropout``, and the 0/1 draws of mask inputs. The lowerings against it: the conformance suite
(``tests/primitives/philox.yaml``, ``dropout.yaml``; host kernels under Triton's interpreter) and
bit for bit on a GPU (``tests/gpu/test_philox_gpu.py``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from coda_spec import philox  # noqa: E402
from coda_spec.expr import parse  # noqa: E402
from coda_spec.expr.evaluate import evaluate  # noqa: E402
from tests.conftest import checked_text  # noqa: E402


def test_known_answer_of_random123():
    # Random123's kat_vectors: philox4x32_10, counter 0, key 0 -> 6627e8d5 e169c58d ...
    assert int(philox.words(0, torch.zeros(1, dtype=torch.int64))[0]) == 0x6627E8D5


def test_words_match_a_python_int_implementation():
    def ref(seed, c):
        mask = 2**32 - 1
        c0, c1, c2, c3 = c & mask, (c >> 32) & mask, 0, 0
        k0, k1 = seed & mask, (seed >> 32) & mask
        for _ in range(10):
            pb, pa = philox.MUL_B * c2, philox.MUL_A * c0
            c0, c1, c2, c3 = (pb >> 32) ^ c1 ^ k0, pb & mask, (pa >> 32) ^ c3 ^ k1, pa & mask
            k0, k1 = (k0 + philox.KEY_A) & mask, (k1 + philox.KEY_B) & mask
        return c0

    seed = 0x0123456789ABCDEF
    counters = [0, 1, 2**32 - 1, 2**32, 2**40 + 12345, 2**63 - 1]
    got = philox.words(seed, torch.tensor(counters, dtype=torch.int64))
    assert got.tolist() == [ref(seed, c) for c in counters]


def test_counter_is_offset_plus_row_times_width_plus_column():
    u = philox.uniform(5, 2**32 - 3, 3, 4)
    flat = philox.uniform(5, 2**32 - 3, 1, 12)
    assert torch.equal(u.reshape(-1), flat.reshape(-1))
    assert torch.equal(philox.counters(-1, 1, 2), torch.tensor([[-1, 0]]))  # wraps mod 2^64


def test_uniforms_are_exact_multiples_of_2_to_the_minus_24_in_range():
    u = philox.uniform(11, 0, 64, 64)
    assert float(u.min()) >= 0.0 and float(u.max()) <= 1 - 2**-24
    assert torch.equal(u.float().double(), u)  # exact in fp32
    assert torch.equal(u * 2**24, (u * 2**24).round())
    assert 0.45 < float(u.mean()) < 0.55
    assert not torch.equal(u, philox.uniform(12, 0, 64, 64))  # another seed, other numbers


def test_dropout_in_the_math_language_has_a_constant_mask_under_vjp():
    seed, offset = torch.tensor(3), torch.tensor(100)
    x = torch.randn(8, 16, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(8, 16, dtype=torch.float64)
    env = {"x": x, "dy": dy, "seed": seed, "offset": offset}
    out = evaluate(parse("y = dropout(x, 0.25, seed, offset)\ng = vjp(y, x, dy)"), env)
    keep = (philox.uniform(3, 100, 8, 16) >= 0.25).double()
    assert torch.equal(out["y"].detach(), x.detach() * keep / 0.75)
    assert torch.equal(out["g"], dy * keep / 0.75)
    u = evaluate(parse("u = philox_uniform(seed, offset, 8, 16)"), env)["u"]
    assert torch.equal(u, philox.uniform(3, 100, 8, 16))


MASKS = """
coda: 1
name: masks
dims: {M: dynamic, D: 32}
tensors:
  y: {shape: [M, D], dtype: bf16}
  w: {shape: [D, D], dtype: bf16}
  keep: {shape: [M, D], dtype: uint8}
  flag: {shape: [M, D], dtype: bool}
  wide: {shape: [M, D], dtype: uint8, range: [0, 4]}
steps:
  - kernel: k
    gemm: {a: y, b: w.T}
    epilogue:
      - {load_tile: keep}
      - {load_tile: flag}
      - {load_tile: wide}
      - {mul: [acc, keep], as: a}
      - {mul: [a, flag], as: b}
      - {mul: [b, wide], as: out}
      - {store: out}
outputs: {out: bf16}
"""


def test_mask_inputs_draw_zero_and_one_and_read_as_numbers():
    from coda_spec.prove.inputs import make_inputs

    c = checked_text(MASKS)
    low, exact = make_inputs(c.spec, {"M": 64, "D": 32}, seed=0)
    assert low["keep"].dtype == torch.uint8 and low["flag"].dtype == torch.bool
    assert set(low["keep"].unique().tolist()) == {0, 1}
    assert set(low["wide"].unique().tolist()) == {0, 1, 2, 3}  # range: [0, 4): integers
    assert exact["flag"].dtype == torch.float64  # the math reads masks as 0/1 numbers


def test_a_bool_tile_is_read_through_its_uint8_bytes_in_a_kernel():
    from coda_spec.config import BuildConfig
    from coda_spec.lower.module import lower_spec

    lowered = lower_spec(checked_text(MASKS), BuildConfig())
    fields = {f.tensor: f for k in lowered.kernels for f in k.fields}
    assert (fields["flag"].dtype, fields["flag"].transform) == ("uint8", "as_uint8")
    assert (fields["keep"].dtype, fields["keep"].transform) == ("uint8", "")
