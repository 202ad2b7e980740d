"""Shared fixtures: golden-file comparison and the bundled catalogue.

Golden files are regenerated with ``CODA_UPDATE_GOLDEN=1 python -m pytest ...``; review the diff.
GPU tests carry the ``gpu`` marker and skip cleanly on machines without a CUDA device; on a GPU
machine, a test whose build is missing fails with the command that makes it (``need_build``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.yaml"))


def assert_golden(path: Path, text: str) -> None:
    """Compare ``text`` with the golden file, or write it when CODA_UPDATE_GOLDEN=1."""
    if os.environ.get("CODA_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"missing golden {path}; run with CODA_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} differs from its golden file"


def need_build(name: str, spec: str | None = None) -> Path:
    """``build/<name>-latest`` for a GPU test; a missing build FAILS the test, naming the
    command that makes it (a GPU run without builds must not pass by skipping everything)."""
    d = ROOT / "build" / f"{name}-latest"
    if not (d / "manifest.json").is_file():
        pytest.fail(f"no build of {name}: run `coda build {spec or f'specs/{name}.yaml'}` first")
    return d


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the lent H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
