"""What ``coda check`` accepts, ``coda build`` lowers; what build would refuse, check refuses at
the line (issue 31, "one rule set"). The same for ``coda grad``'s output.

The property, over every spec in the repository (specs/, specs/grad, tests/**/*.yaml, benchmarks/
**/*.yaml and the full specs in docs/*.md and README.md) and a fixed-seed sample of fuzzed
variants of the catalogue (delete a line, swap two tokens, change a number):

* the front end either refuses the spec with located diagnostics (a file, a line), or accepts it;
* an accepted spec goes through the build's lower stage (``lower/dry_run.py``: every GEMM
  epilogue and every host kernel generated as ``coda build`` generates them) with no exception
  but a located refusal; ``coda check`` reports that refusal as its own (exit 2).

The compile that follows (QuACK's sm_90a trace, Triton's compile) is bounded: it is a few
seconds per kernel, so the full builds are a fixed sample in the slow tier (tests/test_pair_f32.py
builds the acc_pair fp32 store; the catalogue builds in tests/test_build.py).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from coda_spec.check.frontend import check_file, check_source
from coda_spec.check.source import parse_text
from coda_spec.errors import SpecError, ToolError
from coda_spec.grad.command import run_grad
from coda_spec.lower.dry_run import lowering_refusals
from tests.conftest import ROOT, coda_check

pytestmark = pytest.mark.usefixtures("at_root")


def _repo_specs() -> list[Path]:
    paths = sorted((ROOT / "specs").rglob("*.yaml")) + sorted((ROOT / "benchmarks").rglob("*.yaml"))
    paths += [
        p
        for p in sorted((ROOT / "tests").rglob("*.yaml"))
        if "golden" not in p.parts
        and p.read_text(errors="replace").lstrip().startswith(("coda:", "#"))
    ]
    return [p.relative_to(ROOT) for p in paths]


def _doc_blocks() -> list[tuple[str, str]]:
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S)):
            if block.lstrip().startswith("coda: 1"):
                out.append((f"{doc.name}#{i}", block))
    return out


def _agree(file: str, text: str | None = None) -> str:
    """The property for one spec; returns 'refused' or 'lowers'."""
    try:
        checked = check_file(file) if text is None else check_source(parse_text(file, text))
    except (SpecError, ToolError) as e:
        diags = getattr(e, "diagnostics", None)
        assert diags is None or all(d.file for d in diags), diags
        return "refused"
    refused = lowering_refusals(checked)  # raises on anything but a located refusal
    assert all(d.file and d.line > 0 for d in refused), refused
    return "refused" if refused else "lowers"


REPO = _repo_specs()


@pytest.mark.parametrize("path", REPO, ids=[str(p) for p in REPO])
def test_every_repo_spec_lowers_or_is_refused(path):
    _agree(str(path))


def test_every_doc_spec_lowers_or_is_refused():
    blocks = _doc_blocks()
    assert len(blocks) >= 3
    for name, text in blocks:
        _agree(name, text)


def _mutants(n: int, seed: int = 31) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    sources = sorted((ROOT / "specs").glob("*.yaml"))
    out = []
    while len(out) < n:
        path = rng.choice(sources)
        lines = path.read_text().splitlines()
        i = rng.randrange(len(lines))
        how = rng.choice(("delete", "swap", "number"))
        if how == "delete":
            lines = lines[:i] + lines[i + 1 :]
        elif how == "swap":
            words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", lines[i])
            if len(words) < 2:
                continue
            a, b = rng.sample(words, 2)
            lines[i] = lines[i].replace(a, "\0").replace(b, a).replace("\0", b)
        else:
            nums = list(re.finditer(r"\d+", lines[i]))
            if not nums:
                continue
            m = rng.choice(nums)
            new = str(rng.choice((0, 1, 2, 3, 7, 16, 33, 64, 100, 1023, int(m.group()) * 2)))
            lines[i] = lines[i][: m.start()] + new + lines[i][m.end() :]
        out.append((f"{path.stem}-{len(out)}.yaml", "\n".join(lines) + "\n"))
    return out


@pytest.mark.slow  # 300 specs through check and the lower stage (~2 s)
def test_fuzzed_variants_lower_or_are_refused():
    outcomes = [_agree(name, text) for name, text in _mutants(300)]
    assert outcomes.count("lowers") >= 10 and outcomes.count("refused") >= 10


GELU_MLP = ROOT / "tests" / "grad_specs" / "gelu_mlp_bias.yaml"


def test_grad_of_a_biased_gelu_mlp_lowers(tmp_path):
    """Issue 31: coda grad wrote and proved a section whose host step ('down_bwd': the output
    bias's gradient, a column sum with no GEMM to hold it) build refused; it now lowers, and its
    finalize folds the (M, D) per-row terms over the rows."""
    from coda_spec.lower.host_kernel import host_kernel

    src = GELU_MLP
    out = tmp_path / "gelu_mlp_grad.yaml"
    code, _ = run_grad(str(src), out=str(out))
    assert code == 0
    checked = check_file(str(out))
    assert lowering_refusals(checked) == []
    outputs = host_kernel(checked, "down_bwd").outputs
    assert {o["tensor"]: o["shape"] for o in outputs} == {"reduce_col_b_down": ["M", 256]}
    assert coda_check(str(out)).exit_code == 0


GRAD_SOURCES = sorted((ROOT / "specs" / "grad").glob("*.yaml"))


@pytest.mark.slow  # derives and proves each (about a second apiece)
@pytest.mark.parametrize("path", GRAD_SOURCES, ids=[p.stem for p in GRAD_SOURCES])
def test_grad_output_lowers_or_grad_refuses(path, tmp_path):
    out = tmp_path / path.name
    code, _ = run_grad(str(path.relative_to(ROOT)), out=str(out), replace=True)
    assert code in (0, 2)
    if code == 0:
        assert _agree(str(out)) == "lowers"
