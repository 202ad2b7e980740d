"""benchmarks/untuned_pick.py ranks candidate configs from tune files (the untuned pick's data)."""

from __future__ import annotations

import importlib.util
import json
import sys

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("untuned_pick", ROOT / "benchmarks/untuned_pick.py")
untuned_pick = importlib.util.module_from_spec(spec)
sys.modules.setdefault("untuned_pick", untuned_pick)  # dataclasses look their module up
spec.loader.exec_module(untuned_pick)


def _entry(cands: dict) -> dict:
    return {"dims": {"D": 2048}, "m_max": 8192, "config": "a", "candidates": cands}


TABLE = {
    "format": 1,
    "builds": {
        "x-0123456789ab": {
            "spec": "x",
            "kernels": {
                "k1": [_entry({"a": 1.00, "b": 1.10, "c": None})],
                "k2": [_entry({"a": 2.06, "b": 2.00, "c": 2.00})],
                "k3": [_entry({"a": 1.0})],  # one candidate: not a point
            },
        }
    },
}


def test_ranks_by_points_within_then_mean(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(TABLE))
    pts = untuned_pick.points([TABLE])
    assert [label for label, _ in pts] == ["x/k1 [D=2048] M<=8192", "x/k2 [D=2048] M<=8192"]
    ranks = untuned_pick.rank(pts, 0.05)
    assert [r.config for r in ranks] == ["a", "b", "c"]  # c ran at one point of two: last
    a = ranks[0]
    assert (a.within, a.points) == (2, 2) and abs(a.worst - 0.03) < 1e-12
    assert abs(ranks[1].worst - 0.10) < 1e-12 and ranks[1].worst_at.startswith("x/k1")
    assert untuned_pick.main([str(p)]) == 0
    assert "| c | 1 (ran at 1) |" in capsys.readouterr().out


def test_no_points_is_a_failure(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"format": 1, "builds": {}}))
    assert untuned_pick.main([str(p)]) == 1
