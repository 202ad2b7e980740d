"""``softmax_row`` and ``prepass: logsumexp``: a row softmax / log-sum-exp in a GEMM epilogue when
the row fits one CTA tile (issue 35's MoE router, ``tests/specs_extra/moe_router_softmax.yaml``).

The conformance suite (``tests/primitives/softmax_row.yaml``) proves, mutates and goldens the
primitive; the bad specs ``softmax_row_*`` pin the located refusals at a config; this file pins
the rule that judges a config, the refusals that do not depend on one (a dynamic N, a pair
kernel), the lowering's shape (one prepass statistic with the log-add-exp fold, ``x``
re-computed there) and ``coda grad``'s located refusal. GPU: ``tests/gpu/test_softmax_row_gpu.py``.
"""

from __future__ import annotations

import math

import pytest

from coda_spec.check.frontend import check_file
from coda_spec.config import DEFAULT, BuildConfig, KernelSizes, parse_config
from coda_spec.errors import SpecError
from coda_spec.lower.module import lower_spec
from coda_spec.primitives._reduce import whole_row_refusal
from tests.conftest import ROOT, checked_text

ROUTER = ROOT / "tests" / "specs_extra" / "moe_router_softmax.yaml"
LOG_SOFTMAX = ROOT / "tests" / "specs_extra" / "log_softmax_row.yaml"


@pytest.mark.parametrize(
    "n, tile_n, fix",
    [
        (128, 128, None),
        (128, 256, None),  # two groups per tile: columns past N never mix into a row
        (64, 256, None),
        (128, 64, "tile_N = 128 (e.g. configs: ['128x128,"),
        (192, 128, "tile_N = 192 (e.g. configs: ['128x192,"),
        (40, 64, "tile_N = 80 (e.g. configs: ['128x80,"),  # the first multiple of 16
        (384, 256, "no sm90 tile_N (a multiple of 16 up to 256) is a multiple of 384"),
        (100, 128, "no sm90 tile_N (a multiple of 16 up to 256) is a multiple of 100"),
    ],
)
def test_a_row_must_lie_in_one_tile(n, tile_n, fix):
    why = whole_row_refusal(BuildConfig(tile_n=tile_n), KernelSizes(width=n), "softmax_row")
    if fix is None:
        assert why is None
    else:
        assert f"GEMM N = {n} must divide tile_N = {tile_n}" in why and fix in why


def test_a_dynamic_n_is_refused_at_the_item():
    """The row width is the statistic's compiled-in group: a dynamic N cannot be one."""
    text = ROUTER.read_text().replace("{a: h, b: w_router.T} ", "{a: w_router, b: h.T}")
    with pytest.raises(SpecError) as e:
        checked_text(text, "router.yaml")
    (d,) = e.value.diagnostics
    assert (d.line, d.col) == (19, 23)
    assert "softmax_row: the row width 'M' is not a static size" in d.message
    assert "its columns (N) over the softmax's" in d.hint


PAIR = """\
coda: 1
name: pair_softmax
dims: {M: dynamic, D: 64, F: 128}
tensors:
  h:    {shape: [M, D], dtype: bf16}
  w_gu: {shape: ["2*F", D], dtype: bf16}
steps:
  - kernel: k
    gemm: {a: h, b: w_gu.T}
    epilogue:
      - {swiglu: acc, as: a}
      - {softmax_row: a, as: p}
      - {store: p}
outputs: {p: bf16}
"""


def test_a_pair_kernel_is_refused_at_the_item():
    with pytest.raises(SpecError) as e:
        checked_text(PAIR, "pair.yaml")
    (d,) = e.value.diagnostics
    assert (d.line, d.col) == (12, 9)
    assert "cannot lower 'softmax_row'" in d.message and "adjacent column pairs" in d.message


def test_the_router_lowers_to_one_lse_statistic_and_an_exp():
    checked = check_file(ROUTER)
    (k,) = lower_spec(checked, parse_config(checked.spec.configs[0])).kernels
    text = "\n".join([*k.globals, *k.body])
    assert 'GroupStat("probs_lse", combine="lse")' in text
    assert "probs = cute.math.exp(acc - probs_lse)" in text
    assert [f.shape for f in k.fields if f.role == "group_stat"] == [(128,)]  # group = N


def test_a_prepass_logsumexp_recomputes_its_input_in_the_prepass_fn():
    module = lower_spec(check_file(LOG_SOFTMAX), DEFAULT)
    (k,), source = module.kernels, module.source
    assert 'GroupStat("lse", combine="lse")' in source
    prepass = source.split("def coda_head_prepass(acc):", 1)[1].split("\n\n", 1)[0]
    assert "z = acc * 0.5" in prepass and 'return {"lse": lse_in}' in prepass
    assert "logp = z - lse" in "\n".join(k.body)


def test_coda_grad_refuses_it_located():
    from coda_spec.grad import derive_text
    from coda_spec.grad.facts import Unsupported

    with pytest.raises(Unsupported) as e:
        derive_text(check_file(ROUTER))
    assert (e.value.loc.line, e.value.loc.col) == (19, 9)
    assert "a row softmax" in e.value.message and "rowsum(dy * y)" in e.value.message
    assert "backward: section" in e.value.hint


def test_group_stat_lse_fold():
    pytest.importorskip("quack")
    from coda_spec.lower.quack_ops.group_stat import GroupStat, logaddexp

    op = GroupStat("s", combine="lse")
    assert op._combine_op() is logaddexp
    assert op._fold_identity() == -math.inf
    assert op.config_key() == ("lse", False) != GroupStat("s", combine="max").config_key()
    with pytest.raises(ValueError):
        GroupStat("s", combine="lse", mean=True)
