"""examples/train_llama.py stays runnable: both of its runs, on the CPU at a tiny config.

The example trains on the GPU (docs/training.md, "Training on real text"); here ``--device
cpu`` runs the same loop through transformers and through coda's chains on the CPU (CPU builds
of the model's llama3 specs, re-sized to the tiny config at load), three steps each on the
standard library's own source: both start from the same loss, stay finite, and coda's run
follows transformers'.
"""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT


def _tiny() -> dict:
    """test_nn_llama's tiny GQA config (the CPU builds' dims) with the example's byte vocabulary
    and RoPE (a default one: the example's)."""
    from tests.test_nn_llama import TINY

    rope = {"rope_type": "default", "rope_theta": 10000.0}
    return {**TINY, "vocab_size": 256, "tie_word_embeddings": True, "rope_parameters": rope}


def test_both_runs_of_the_example_train_on_the_cpu(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("tqdm")
    from coda_spec import ops
    from coda_spec.nn.llama import CHAINS
    from tests.test_nn_llama import cpu_builds

    train_llama = _example(monkeypatch)
    monkeypatch.setattr(train_llama, "SMALL", _tiny())
    monkeypatch.setattr(ops, "_OPS", {})
    args = SimpleNamespace(
        builds=cpu_builds(tmp_path, monkeypatch, CHAINS),
        steps=3,
        batch=2,
        seq=32,
        lr=1e-3,
        warmup=1,
        seed=0,
        device="cpu",
    )
    text, _ = train_llama.corpus(1)
    hf = train_llama.train("transformers", args, text)
    coda = train_llama.train("coda", args, text)
    for run in (hf, coda):
        assert len(run["losses"]) == 3 and all(math.isfinite(x) for x in run["losses"])
        assert run["tokens_per_s"] > 0
    assert coda["losses"][0] == pytest.approx(hf["losses"][0], rel=1e-3)
    assert coda["losses"][-1] == pytest.approx(hf["losses"][-1], rel=2e-3)


def _example(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    sys.modules.pop("train_llama", None)
    import train_llama

    return train_llama


@pytest.mark.parametrize(
    ("argv", "status", "want"),
    [
        (["--device", "cuda"], 4, "no CUDA GPU here: .* --device cpu runs both loops"),
        (["--device", "cpu", "--builds", "{tmp}"], 2, "no build of llama3_first at .* coda build"),
    ],
    ids=["no-gpu", "no-builds"],
)
def test_the_example_refuses_what_it_cannot_run_without_a_traceback(
    tmp_path, monkeypatch, capsys, argv, status, want
):
    """Before: ``AssertionError: Torch not compiled with CUDA enabled`` (or the missing build's
    ``CodaRuntimeError``) as a traceback, after reading the corpus and training transformers."""
    pytest.importorskip("transformers")
    import re

    import torch

    train_llama = _example(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(train_llama, "corpus", lambda mb: pytest.fail("read the corpus"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    monkeypatch.setattr(sys, "argv", ["train_llama.py", *argv, "--out", str(tmp_path)])
    assert train_llama.main() == status
    err = capsys.readouterr().err
    assert re.search("train_llama.py: error: " + want, err), err
