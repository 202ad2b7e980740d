"""``coda_spec.finalize.TABLE`` is the one home of the finalize ops: every reader agrees with it.

For each op: the schema and docs/spec-language.md name the same ops and reductions; the typing
checks (``check.steps``) accept exactly the reductions, ``n`` and ``eps`` its row allows; the
reference folds a reduction over nothing (M = 0 rows) to the documented value (docs/runtime.md:
sums and means 0, rsqrt_mean rsqrt(eps), max and logsumexp -inf); the generated finalize kernel
folds its tiles from the row's identity with the row's fold and inserts the row's Triton text;
a host kernel that folds the finalize inserts the same text.
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest

from coda_spec.check.frontend import check_source
from coda_spec.check.source import parse_text
from coda_spec.errors import SpecError
from coda_spec.finalize import EMPTY_FOLD, FOLD_OPS, OPS, REDUCTIONS, TABLE, fold
from coda_spec.lower.finalize_kernel import finalize_kernel
from coda_spec.lower.host_kernel import host_kernel
from coda_spec.primitives._reduce import combine
from coda_spec.schema import structure_defs
from tests.conftest import ROOT

EPS = 1e-6
# The rule docs/runtime.md documents for a reduction over nothing, stated here on its own.
OVER_NOTHING = {
    "sum": 0.0,
    "mean": 0.0,
    "rsqrt_mean": 1 / math.sqrt(EPS),
    "max": -math.inf,
    "logsumexp": -math.inf,
    "var": 0.0,
}

HOST = """\
coda: 1
name: t
dims: {{M: dynamic, D: 256}}
tensors:
  x: {{shape: [M, D], dtype: bf16}}
  w: {{shape: [M, D], dtype: bf16}}
steps:
  - host: h
    over: x
    body:
      - {{load_tile: x}}
      - {{load_tile: w}}
      - {{reduce_row: {kind}, of: {of}, as: part}}
  - {{finalize: {op}, of: part,{extra} as: r}}
outputs: {{r: fp32}}
"""


def _spec(kind: str, op: str, extra: str = ""):
    of = "[x, w]" if kind == "dot" else "x"
    text = HOST.format(kind=kind, of=of, op=op, extra=extra)
    if ROWS[op].second and "part2" in extra:  # the second partial, of the same step
        more = f"      - {{reduce_row: {ROWS[op].second}, of: x, as: part2}}\n"
        text = text.replace("as: part}\n", "as: part}\n" + more, 1)
    return check_source(parse_text("t.yaml", text))


def _extra(row) -> str:
    return (
        (" n: D," if row.needs_n else "")
        + (f" eps: {EPS}," if row.needs_eps else "")
        + (f" {row.second}: part2," if row.second else "")
    )


ROWS = {row.name: row for row in TABLE}


def test_the_schema_and_the_docs_name_the_table():
    assert OVER_NOTHING.keys() == set(OPS)
    finalize = structure_defs()["finalize"]["properties"]["finalize"]
    assert finalize == {"enum": list(OPS)}
    doc = (ROOT / "docs" / "spec-language.md").read_text()
    section = doc[doc.index("## Finalize steps") : doc.index("## Host steps")]
    rows = re.findall(r"^\| `(\w+)` \| .* \| ([\w, ]+) \|$", section, re.M)
    assert [(op, tuple(reads.split(", "))) for op, reads in rows] == [
        (row.name, row.reads) for row in TABLE
    ]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind", REDUCTIONS)
def test_typing_accepts_exactly_the_reductions_the_row_folds(op, kind):
    row = ROWS[op]
    if kind in row.reads:
        _spec(kind, op, _extra(row))
        return
    with pytest.raises(SpecError, match=f"'{op}' cannot fold '{kind}' partials"):
        _spec(kind, op, _extra(row))


@pytest.mark.parametrize("op", OPS)
def test_typing_takes_n_and_eps_where_the_row_says(op):
    row, kind = ROWS[op], ROWS[op].reads[0]
    if row.needs_eps:
        with pytest.raises(SpecError, match=f"{op} needs eps"):
            _spec(kind, op, " n: D,")
    else:
        with pytest.raises(SpecError, match="eps applies to rsqrt_mean only"):
            _spec(kind, op, _extra(row) + f" eps: {EPS},")
    if not row.needs_n:
        with pytest.raises(SpecError, match="n applies to mean, rsqrt_mean and var only"):
            _spec(kind, op, " n: D," + _extra(row))


@pytest.mark.parametrize("op", OPS)
def test_the_reference_folds_nothing_to_the_documented_value(op):
    torch = pytest.importorskip("torch")
    rt = SimpleNamespace(torch=torch)
    row = ROWS[op]
    assert EMPTY_FOLD[row.fold] == row.empty
    for kind in row.reads:
        of = torch.zeros(0, 4)
        partial = combine(rt, kind, [of, of] if kind == "dot" else of, dim=0)  # a column [1, 4]
        second = combine(rt, row.second, of, dim=0) if row.second else None
        got = fold(rt, op, partial, 0, EPS if row.needs_eps else None, "colpart", second=second)
        want = torch.full((4,), OVER_NOTHING[op])
        assert torch.allclose(got, want), (kind, got)
        # over every row too (a per-tensor [] statistic): the same value over nothing
        rows = torch.zeros(0, 1)
        got = fold(
            rt,
            op,
            rows,
            0,
            EPS if row.needs_eps else None,
            "rowpart",
            over=True,
            second=rows if row.second else None,
        )
        assert got.shape == () and torch.allclose(got, torch.tensor(OVER_NOTHING[op])), got


def _literal(value: float) -> str:
    return {0.0: "0.0", -math.inf: 'float("-inf")'}[value]


@pytest.mark.parametrize("op", OPS)
def test_the_finalize_kernel_folds_and_computes_as_the_row_says(op):
    row = ROWS[op]
    step = {
        "name": "finalize_r",
        "op": op,
        "of": "part",
        "result": "r",
        "n": 256 if row.needs_n else None,
        "eps": EPS if row.needs_eps else None,
        "line": 1,
    }
    if row.second:
        step["second"] = "part2"
    for fold_ in FOLD_OPS:
        if fold_ != row.fold:
            with pytest.raises(ValueError, match=f"'{op}' cannot fold {fold_} partials"):
                finalize_kernel(step, "colred", fold_, ["M", 16], spec_file="t.yaml")
            continue
        src = finalize_kernel(step, "colred", fold_, ["M", 16], spec_file="t.yaml").source
        assert f"other={_literal(row.empty)})" in src  # tiles past the end fold as nothing
        text = row.triton.format(x="mean" if row.needs_n else "acc", x2="mean2", eps="EPS")
        if text not in ("mean", "acc"):
            assert f"y = {text}\n" in src
        assert ("EPS: tl.constexpr" in src) == row.needs_eps
        assert ("N: tl.constexpr" in src) == row.needs_n


@pytest.mark.parametrize("op", OPS)
def test_a_host_kernel_folds_the_finalize_with_the_rows_text(op):
    row = ROWS[op]
    kernel = host_kernel(_spec(row.reads[0], op, _extra(row)), "h")
    assert kernel.folds == ("finalize_r",)
    x = "part / n_r.to(tl.float32)" if row.needs_n else "part"
    value = row.triton.format(x=x, x2="part2 / n_r.to(tl.float32)", eps=repr(EPS))
    if value == "part":
        assert "tl.store(r_ptr + row, part)" in kernel.source
    else:
        assert f"r = {value}\n" in kernel.source
        assert "tl.store(r_ptr + row, r)" in kernel.source
