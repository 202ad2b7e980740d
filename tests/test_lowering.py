"""Golden generated code: the kernel.py of EVERY bundled spec, plus lowering refusals.

Lowering is pure text (no quack import), so these run without compiling. Regenerate with
``CODA_UPDATE_GOLDEN=1 python -m pytest tests/test_lowering.py`` and review the diff.
"""

from __future__ import annotations

import ast
import json
from dataclasses import asdict

import pytest

from coda_spec.config import BuildConfig
from coda_spec.errors import SpecError
from coda_spec.frontend import check_file, check_source
from coda_spec.lower.module import lower_spec
from coda_spec.source import parse_text
from tests.conftest import ROOT, SPECS, assert_golden

IDS = [p.stem for p in SPECS]


@pytest.fixture(autouse=True)
def _chdir_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("path", SPECS, ids=IDS)
def test_generated_kernel_module_matches_golden(path):
    checked = check_file(path.relative_to(ROOT))
    lowered = lower_spec(checked, BuildConfig())
    ast.parse(lowered.source)  # a real, importable Python module
    assert_golden(ROOT / "tests" / "golden" / "kernels" / f"{path.stem}.py", lowered.source)
    calls = json.dumps([[asdict(f) for f in k.fields] for k in lowered.kernels], indent=1) + "\n"
    assert_golden(ROOT / "tests" / "golden" / "kernels" / f"{path.stem}.fields.json", calls)


@pytest.mark.parametrize("path", SPECS, ids=IDS)
def test_every_statement_names_its_spec_line(path):
    checked = check_file(path.relative_to(ROOT))
    source = lower_spec(checked, BuildConfig()).source
    inside, last_comment = False, ""
    for ln in source.splitlines():
        if ln.startswith("def coda_"):
            inside, last_comment = True, ""
            continue
        if not ln.startswith("    "):
            inside = inside and not ln.strip()
            continue
        if not inside:
            continue
        s = ln.strip()
        if s.startswith("#"):
            last_comment = s
        elif not s.startswith("return"):
            assert f"# {checked.spec.file}:" in last_comment, ln


def test_banner_names_spec_hash_and_tools():
    checked = check_file("specs/rmsnorm_chain.yaml")
    head = lower_spec(checked, BuildConfig()).source.splitlines()[:3]
    assert f"spec hash {checked.spec.digest}" in head[0]
    assert "do not edit" in head[1]
    assert "quack-kernels 0.6.5" in head[2] or "not installed" in head[2]


UNSUPPORTED = """\
coda: 1
name: onehot_in_gemm
dims: {M: dynamic, N: 256, K: 256}
tensors:
  a: {shape: [M, K], dtype: bf16}
  w: {shape: [N, K], dtype: bf16}
  t: {shape: [M], dtype: int32, range: [0, N]}
steps:
  - kernel: k
    gemm: {a: a, b: w.T}
    epilogue:
      - {onehot: t, as: oh}
      - {sub: [acc, oh], as: y}
      - {store: y}
outputs: {y: bf16}
"""


def test_primitive_without_lowering_is_refused_at_its_line():
    checked = check_source(parse_text("x.yaml", UNSUPPORTED))
    with pytest.raises(SpecError) as e:
        lower_spec(checked, BuildConfig())
    (d,) = e.value.diagnostics
    assert (d.line, d.col) == (12, 9)
    assert "cannot lower 'onehot'" in d.message
