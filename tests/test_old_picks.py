"""benchmarks/old_picks.py writes a valid tune file: the old picks keyed by today's builds."""

from __future__ import annotations

import importlib.util
import json
import sys

from coda_spec.artifact.tune_table import read_file
from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("old_picks", ROOT / "benchmarks/old_picks.py")
old_picks = importlib.util.module_from_spec(spec)
sys.modules.setdefault("old_picks", old_picks)
spec.loader.exec_module(old_picks)

PP = "128x128,cluster=2x1,pingpong"
COOP = "128x256,cluster=2x1,cooperative,cstages=2"


def _row(config: str) -> dict:
    return {
        "dims": {"D": 2048},
        "m_max": 8192,
        "config": config,
        "ms": 1.0,
        "margin": 0.03,
        "rounds": 30,
        "candidates": {PP: 1.1, config: 1.0},
        "spread": {},
    }


def test_old_picks_move_onto_todays_build(tmp_path):
    old = {
        "format": 1,
        "builds": {
            "llama3_last-aaaaaaaaaaaa": {
                "spec": "llama3_last",
                "gpu": "NVIDIA H200",
                "date": "2026-12-02",
                "kernels": {"lm_head_lse": [_row(COOP)], "wgrad_lm": [_row("256x64,cluster=1x1")]},
            }
        },
    }
    (tmp_path / "old.json").write_text(json.dumps(old))
    build = tmp_path / "b" / "llama3_lm_head-bbbbbbbbbbbb"
    build.mkdir(parents=True)
    (tmp_path / "b" / "llama3_lm_head-latest").symlink_to(build.name)
    manifest = {
        "configs": [
            {"tile_m": 128, "tile_n": 128, "cluster_m": 2, "cluster_n": 1, "pingpong": True},
            {
                "tile_m": 128,
                "tile_n": 256,
                "cluster_m": 2,
                "cluster_n": 1,
                "pingpong": False,
                "c_stages": 2,
            },
        ],
        "steps": [
            {"step": "lm_head_logits", "kind": "kernel"},
            {"step": "lse", "kind": "host"},
            {"step": "wgrad_lm", "kind": "kernel"},
        ],
        "backward_steps": [],
    }
    (build / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "out.json"
    assert old_picks.main([str(tmp_path / "old.json"), str(tmp_path / "b"), str(out)]) == 0
    got = read_file(out)["builds"][build.name]
    # lm_head_logits takes lm_head_lse's pick; wgrad_lm's old pick is not a variant here: left out
    assert got["kernels"]["lm_head_logits"][0]["config"] == COOP
    assert "wgrad_lm" not in got["kernels"]
    assert got["gpu"] == "NVIDIA H200" and "old_picks.py" in got["note"]
