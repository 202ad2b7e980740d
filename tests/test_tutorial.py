"""docs/tutorial.md shows real output: each CPU command it shows is run again here, on the file
as the tutorial has it at that point, and must print what the page says (timings aside); its
training loop (examples/tutorial/train_relu2.py) trains on the CPU through the chain's op.

The page marks each shown command with the version of the file it runs on,
``<!-- tutorial: vN -->`` before a ``console`` block. The versions are made here from the
finished spec, examples/tutorial/relu2_mlp.yaml, by undoing the tutorial's fixes (:data:`FIXES`),
and the page's YAML blocks must be what those versions hold. GPU output (verify, bench) is quoted
from a dated H200 run and not replayed.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests import test_runtime_cpu as rt
from tests.conftest import ROOT

FINAL = ROOT / "examples" / "tutorial" / "relu2_mlp.yaml"
PAGE = ROOT / "docs" / "tutorial.md"
FIX_QUOTES = [
    ('doc: "up projection (out, in)"', "doc: up projection (out, in)"),
    ('doc: "down projection (out, in)"', "doc: down projection (out, in)"),
]
FIX_FACTOR = [
    (
        "        - {scale: rz, by: 2.0, as: slope} # d(relu(z)^2)/dz = 2 relu(z)\n"
        "        - {mul: [acc, slope], as: dz}    # dL/dz = dL/dh * 2 relu(z)\n",
        "        - {mul: [acc, rz], as: dz}       # dL/dz = dL/dh * d(relu(z)^2)/dz\n",
    )
]


def _undo(text: str, fixes) -> str:
    for fixed, wrong in fixes:
        assert fixed in text, f"the finished spec no longer holds {fixed!r}"
        text = text.replace(fixed, wrong)
    return text


def versions() -> dict:
    """The file at each point of the tutorial: v1 forward with the quoting mistake, v2 fixed,
    v3 with the backward's mistake, v4 the finished spec."""
    final = FINAL.read_text()
    forward = final.split("backward:\n")[0]
    return {
        "v1": _undo(forward, FIX_QUOTES),
        "v2": forward,
        "v3": _undo(final, FIX_FACTOR),
        "v4": final,
    }


def _shown() -> list:
    """(version, command, output) of each console block the page marks."""
    text = PAGE.read_text()
    blocks = re.findall(r"<!-- tutorial: (v\d) -->\n```console\n(.*?)```", text, flags=re.S)
    out = []
    for version, body in blocks:
        command, _, output = body.partition("\n")
        assert command.startswith("$ coda "), command
        out.append((version, command[2:], output))
    return out


def _timeless(text: str) -> str:
    return re.sub(r"\d+\.\d+s\b", "<t>s", text)


def test_the_page_marks_its_commands():
    shown = _shown()
    assert len(shown) >= 5
    assert {v for v, _, _ in shown} == set(versions())


@pytest.mark.parametrize("i", range(len(_shown())))
def test_each_shown_command_prints_what_the_page_says(i, tmp_path):
    version, command, output = _shown()[i]
    (tmp_path / "relu2_mlp.yaml").write_text(versions()[version])
    args = command.split()[1:]
    res = subprocess.run(
        [sys.executable, "-m", "coda_spec.cli", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert _timeless(res.stdout + res.stderr) == _timeless(output)


def test_the_pages_yaml_is_the_files():
    """The first YAML block is v1 whole; the backward block is v3's backward section, and the
    fix is a part of v4."""
    blocks = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), flags=re.S)
    v = versions()
    assert blocks[0] == v["v1"]
    assert any(b.startswith("backward:") and b in v["v3"] for b in blocks)
    assert any(b in v["v4"] and b not in v["v3"] for b in blocks if "slope" in b)  # the fix


def test_the_training_loop_trains_on_the_cpu(tmp_path, monkeypatch):
    """train_relu2.py through a small CPU build of the chain (the op runs its reference): the
    loss falls, and coda's curve starts where plain PyTorch's does."""
    from coda_spec import ops

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "tutorial"))
    sys.modules.pop("train_relu2", None)
    import train_relu2

    monkeypatch.setattr(ops, "_OPS", {})
    monkeypatch.setitem(rt.SPECS, "relu2_mlp", (FINAL, {"D": 64, "F": 128}))
    build, _ = rt.make_build(tmp_path, "relu2_mlp")
    args = ["--build", str(build), "--steps", "12", "--rows", "32", "--device", "cpu", "--torch"]
    coda, plain = train_relu2.main(args)
    assert coda[-1][0] < 0.7 * coda[0][0]
    assert abs(coda[0][0] - plain[0][0]) <= 2e-2 * plain[0][0]
