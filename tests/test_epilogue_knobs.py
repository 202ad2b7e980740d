"""Epilogue knobs of a build config (``epi=N``, ``cstages=N``): syntax, rules, hash stability,
and, with the ``[build]`` extra, what they change in QuACK's smem split for b2's kernel.

Why the knobs exist (docs/benchmarks.md, "b2's epilogue stages"): QuACK's default split gives
b2's cooperative 128x256 kernel 2 mainloop (A/B) stages next to 5 epilogue C stages; ncu put 78%
of its stall samples on the mainloop's operand wait. A narrower epilogue subtile or a shallower
C prefetch buys a third A/B stage. The compile tests pin the split QuACK computes, so a QuACK
upgrade that changes it fails here rather than silently in a benchmark.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from coda_spec import cli
from coda_spec.build import BuildOptions, build_spec
from coda_spec.config import BuildConfig, config_tag, config_text, parse_config, parse_configs
from tests.conftest import ROOT, needs_build


@pytest.mark.parametrize(
    "text, tag",
    [
        ("128x256,cluster=2x1,cooperative,epi=16", "128x256_c2x1_coop_e16"),
        ("128x256,cluster=2x1,cooperative,cstages=2", "128x256_c2x1_coop_cs2"),
        ("128x128,cluster=2x1,pingpong,epi=16,cstages=1", "128x128_c2x1_pp_e16_cs1"),
    ],
    ids=["epi", "cstages", "both"],
)
def test_knobs_round_trip_through_text_and_tag(text, tag):
    cfg = parse_config(text)
    assert config_text(cfg.key()) == text
    assert config_tag(cfg.key()) == tag
    assert parse_config(config_text(cfg.key())) == cfg
    assert cfg.problems() == []


def test_default_knobs_leave_the_key_and_so_older_hashes_unchanged():
    assert BuildConfig().key() == {
        "tile_m": 128,
        "tile_n": 256,
        "cluster_m": 2,
        "cluster_n": 1,
        "pingpong": False,
    }
    assert parse_config("128x256,epi=16").key()["epi_n"] == 16


@pytest.mark.parametrize(
    "text, words",
    [
        ("128x256,epi=24", "epilogue width must be 16, 32 or 64"),
        ("128x208,pingpong,epi=32", "divide tile_N=208"),
        ("128x256,cstages=9", "cstages=9 must be 1 to 8"),
    ],
    ids=["odd-width", "not-dividing", "too-deep"],
)
def test_bad_knobs_are_named(text, words):
    (problem,) = parse_config(text).problems()
    assert words in problem


def test_a_bad_knob_is_a_config_error_at_the_cli(tmp_path):
    res = CliRunner().invoke(
        cli.main,
        [
            "build",
            str(ROOT / "specs" / "f2_deferred_norm.yaml"),
            "-o",
            str(tmp_path),
            "--config",
            "128x256,epi=24",
        ],
    )
    assert res.exit_code == 2, res.output
    assert "epilogue width must be 16, 32 or 64" in res.output
    assert "Traceback" not in res.output


def test_an_unknown_knob_names_the_known_ones():
    with pytest.raises(ValueError, match="epi=16, cstages=2"):
        parse_configs("128x256,epi_tile=16")


B2_SPLITS = {  # config -> (epilogue subtile, A/B stages, D stages, C stages), QuACK 0.6.5
    "128x256,cluster=2x1,cooperative": ([128, 32], 2, 2, 5),
    "128x256,cluster=2x1,cooperative,epi=16": ([128, 16], 3, 4, 4),
    "128x256,cluster=2x1,cooperative,cstages=2": ([128, 32], 3, 2, 2),
}


@pytest.fixture(scope="module")
def b2_knob_build(tmp_path_factory):
    configs = parse_configs(";".join(B2_SPLITS))
    opts = BuildOptions(out=tmp_path_factory.mktemp("knobs"), config=configs[0], configs=configs)
    return build_spec(ROOT / "specs" / "b2_dgrad_dswiglu.yaml", opts)


@pytest.mark.slow
@needs_build
@pytest.mark.parametrize("text", list(B2_SPLITS), ids=["default", "epi16", "cstages2"])
def test_knobs_change_quacks_smem_split(b2_knob_build, text):
    from coda_spec import artifact

    m = artifact.read_manifest(b2_knob_build.directory)
    (variant,) = [v for v in m.steps[0].variants if v.name == text]
    record = json.loads((b2_knob_build.directory / f"{variant.symbol}.compiled.json").read_text())
    s = record["stages"]
    assert (s["epi_tile"], s["ab"], s["epi"], s["c"]) == B2_SPLITS[text]


@pytest.mark.slow
@needs_build
def test_the_knobs_leave_quack_as_they_found_it(b2_knob_build):
    """The adapter overrides QuACK's class-level rules for one compile only."""
    from quack.gemm_sm90 import GemmSm90

    from coda_spec.lower.quack_adapter import KNOB_HOOKS, _epilogue_knobs

    before = {n: GemmSm90.__dict__[n] for n in KNOB_HOOKS}
    with _epilogue_knobs({"epi_n": 16, "c_stages": 2}):
        assert GemmSm90.__dict__["epi_c_stage_base"] == 2
    assert {n: GemmSm90.__dict__[n] for n in KNOB_HOOKS} == before


@pytest.mark.slow
@needs_build
def test_the_build_notes_a_starved_mainloop(b2_knob_build):
    """Only the default variant (2 A/B stages) gets the note, with the fix named."""
    log = (b2_knob_build.directory / "build.log").read_text()
    notes = [line for line in log.splitlines() if "A/B stage(s)" in line]
    assert len(notes) == 1, notes
    assert "coda_dgrad_dswiglu: its epilogue leaves the mainloop 2 A/B stage(s)" in notes[0]
    assert "C 5, D 2 at a 128x32 subtile" in notes[0] and "epi=16 or cstages=2" in notes[0]
