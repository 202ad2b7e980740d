"""Config variants at build time (manifest format 4): ``--config`` lists and ``auto``, the
per-kernel ``supports()`` filter, the compile jobs, and one real two-candidate build.

The compile test needs the ``[build]`` extra (as tests/test_build.py does) and compiles one
one-kernel spec at two configs (about 15 s on 2 cores); the rest is pure lowering.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from click.testing import CliRunner

from coda_spec import artifact, cli
from coda_spec.build import BuildOptions, build_spec, lowered_json
from coda_spec.check.frontend import check_file
from coda_spec.config import AUTO, DEFAULT, config_tag, config_text, parse_configs
from coda_spec.errors import SpecError
from coda_spec.lower.module import lower_variants
from coda_spec.lower.quack_adapter import compile_jobs
from tests.conftest import ROOT, needs_build

TWO = "128x256,cluster=2x1,cooperative;128x128,cluster=2x1,pingpong"


@pytest.mark.parametrize(
    "text, want",
    [
        (None, ["128x256,cluster=2x1,cooperative,cstages=2"]),
        ("128x192,cluster=1x1,pingpong", ["128x192,cluster=1x1,pingpong"]),
        (TWO, TWO.split(";")),
        ("auto", list(AUTO)),
    ],
    ids=["default", "one", "list", "auto"],
)
def test_parse_configs(text, want):
    assert [config_text(c.key()) for c in parse_configs(text)] == want


def test_auto_starts_with_the_default():
    assert parse_configs("auto")[0] == DEFAULT == parse_configs(None)[0]
    # issue 9's 22 candidates, each once; the earlier untuned pick stays one of them
    assert len(AUTO) == len(set(parse_configs("auto"))) == 22
    assert "128x128,cluster=2x1,pingpong" in AUTO[1:]


def test_a_config_listed_twice_is_refused():
    res = CliRunner().invoke(
        cli.main, ["build", "specs/f2_deferred_norm.yaml", "--config", "128x256;128x256"]
    )
    assert res.exit_code == 2 and "listed twice" in res.output, res.output


def _with_configs(tmp_path, lines: str):
    """f2_deferred_norm with ``lines`` (a ``configs:`` block) after its dims."""
    text = (ROOT / "specs" / "f2_deferred_norm.yaml").read_text()
    head, dims, rest = text.partition("\ndims:")
    dims_line, nl, tail = rest.partition("\n")
    path = tmp_path / "f2_deferred_norm.yaml"
    path.write_text(head + dims + dims_line + nl + lines + tail)
    return path


def test_the_spec_s_configs_are_its_candidates_unless_config_is_given(tmp_path):
    spec = _with_configs(
        tmp_path, "configs:\n  - 128x192,cluster=2x1,pingpong,epi=16\n  - 128x128,pingpong\n"
    )
    own = CliRunner().invoke(
        cli.main, ["build", str(spec), "--stop-after", "lower", "-o", str(tmp_path / "a")]
    )
    assert own.exit_code == 0, own.output
    (lowered,) = (tmp_path / "a").glob("f2_deferred_norm-*/lowered.json")
    got = json.loads(lowered.read_text())
    assert [config_text(c) for c in got["configs"]] == [
        "128x192,cluster=2x1,pingpong,epi=16",
        "128x128,cluster=2x1,pingpong",
    ]
    flag = CliRunner().invoke(
        cli.main,
        [
            "build",
            str(spec),
            "--stop-after",
            "lower",
            "-o",
            str(tmp_path / "b"),
            "--config",
            "128x256",
        ],
    )
    assert flag.exit_code == 0, flag.output
    (lowered,) = (tmp_path / "b").glob("f2_deferred_norm-*/lowered.json")
    assert [config_text(c) for c in json.loads(lowered.read_text())["configs"]] == [
        "128x256,cluster=2x1,cooperative"
    ]


@pytest.mark.parametrize(
    "lines, want",
    [
        ("configs:\n  - 128x256,pingpong\n", "configs[0]: '128x256,pingpong': pingpong at"),
        ("configs:\n  - 128x128,tiles=2\n", "configs[0]: unknown config item 'tiles=2'"),
        ("configs:\n  - 128x128\n  - 128x128\n", "configs[1]: '128x128' is configs[0] again"),
        ("configs: []\n", "configs"),
    ],
    ids=["tile-rule", "unknown-item", "twice", "empty"],
)
def test_bad_spec_configs_are_located_errors(tmp_path, lines, want):
    spec = _with_configs(tmp_path, lines)
    res = CliRunner().invoke(cli.main, ["check", str(spec)])
    assert res.exit_code == 2, res.output  # invalid spec
    assert f"{spec}:" in res.output and want in res.output, res.output


def test_supports_drops_a_candidate_for_the_kernel_that_refuses_it():
    """f7_qkv_head_sumsq's per-head reduction needs tile_N to hold whole 128-wide heads."""
    checked = check_file(ROOT / "specs" / "f7_qkv_head_sumsq.yaml")
    _, variants, dropped = lower_variants(checked, parse_configs("auto"))
    kept = [config_text(v.config.key()) for v in variants["qkv_head_sumsq"]]
    assert kept[0] == AUTO[0]
    refused = {c for c in AUTO if c.split(",")[0] in ("128x192", "128x64")}
    assert {config_text(c.key()) for _, c, _ in dropped} == refused
    assert set(kept) == set(AUTO) - refused
    assert all("tile_N" in why for _, _, why in dropped)


def test_a_fallback_the_kernel_cannot_take_is_an_error():
    checked = check_file(ROOT / "specs" / "f7_qkv_head_sumsq.yaml")
    with pytest.raises(SpecError, match="tile_N 192"):
        lower_variants(checked, parse_configs("128x192,cluster=1x1,pingpong;128x256"))


def test_variants_carry_their_own_partial_shapes_and_symbols():
    checked = check_file(ROOT / "specs" / "b2_dgrad_dswiglu.yaml")
    lowered, variants, _ = lower_variants(checked, parse_configs(TWO))
    a, b = variants["dgrad_dswiglu"]
    assert a.symbol == "coda_dgrad_dswiglu" and a.function == b.function == a.symbol
    assert b.symbol == "coda_dgrad_dswiglu__" + config_tag(b.config.key())
    part = {f.name: f.shape for f in a.kernel.fields}["zdz_part"]
    assert part == ("M", 43)  # cdiv(11008, 256) N-tiles
    assert {f.name: f.shape for f in b.kernel.fields}["zdz_part"] == ("M", 86)  # tile_N 128
    jobs = compile_jobs(lowered_json(checked, lowered, parse_configs(TWO), variants))
    kernel, config = jobs[b.symbol]
    assert kernel["function"] == a.symbol and config == b.config.key()
    assert jobs[a.symbol][1] == a.config.key()


@pytest.fixture(scope="module")
def two_variant_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("variants")
    configs = parse_configs(TWO)
    opts = BuildOptions(out=out, config=configs[0], configs=configs)
    return build_spec(ROOT / "specs" / "f2_deferred_norm.yaml", opts), out


@pytest.mark.slow
@needs_build
def test_a_two_candidate_build_exports_both_variants(two_variant_build):
    res, _ = two_variant_build
    m = artifact.read_manifest(res.directory)
    assert m.format == artifact.FORMAT_VERSION
    assert [config_text(c) for c in m.configs] == TWO.split(";")
    (step,) = m.steps
    names = [v.symbol for v in step.variants]
    assert names == ["coda_deferred_norm_proj", "coda_deferred_norm_proj__128x128_c2x1_pp"]
    assert [v.name for v in step.variants] == TWO.split(";")
    assert step.fallback.config == m.config
    assert all(v.spills in (0, None) for v in step.variants)
    exported = subprocess.run(
        ["nm", "-D", str(res.directory / m.library)], capture_output=True, text=True
    ).stdout
    assert all(f"__tvm_ffi_{n}" in exported for n in names)
    assert json.loads((res.directory / "lowered.json").read_text())["variants"]


@pytest.mark.slow
@needs_build
def test_candidate_list_is_part_of_the_content_hash(two_variant_build, tmp_path):
    res, out = two_variant_build
    configs = parse_configs(TWO)
    again = build_spec(
        ROOT / "specs" / "f2_deferred_norm.yaml",
        BuildOptions(out=out, config=configs[0], configs=configs, stop_after="lower"),
    )
    assert again.cached and again.directory == res.directory
    one = build_spec(
        ROOT / "specs" / "f2_deferred_norm.yaml",
        BuildOptions(out=tmp_path, config=configs[0], stop_after="lower"),
    )
    assert one.directory.name != res.directory.name


def test_resizing_keeps_a_variant_of_the_kernels_that_support_it(tmp_path):
    """A candidate one kernel refuses (a per-head reduction needs 128 | tile_N) stays a variant
    of the other kernel when verify re-sizes the build to other static dims."""
    from dataclasses import asdict

    from coda_spec.check.frontend import with_dims
    from coda_spec.verify.run import resized_manifest
    from tests.test_verify_cpu import FakeChain, fake_manifest

    checked = check_file(ROOT / "tests" / "specs_extra" / "two_kernels_head_sumsq.yaml")
    configs = parse_configs("128x256,cluster=2x1,cooperative;128x192,cluster=2x1,pingpong")
    _, variants, _ = lower_variants(checked, configs)
    m = fake_manifest(checked)
    for step in m["steps"]:
        if step["kind"] == "kernel":
            base = step["variants"][0]
            step["variants"] = [
                dict(
                    base,
                    name=config_text(v.config.key()),
                    config=v.config.key(),
                    symbol=v.symbol,
                    fields=[asdict(f) for f in v.kernel.fields],
                )
                for v in variants[step["name"]]
            ]
    assert [len(s["variants"]) for s in m["steps"] if s["kind"] == "kernel"] == [2, 1]
    out = resized_manifest(FakeChain(checked, tmp_path, manifest=m), with_dims(checked, {"D": 512}))
    kept = {s.name: [v.name for v in s.variants] for s in out.kernel_steps()}
    assert kept == {"proj": list(TWO_192), "qkv_head_sumsq": [TWO_192[0]]}


TWO_192 = ("128x256,cluster=2x1,cooperative", "128x192,cluster=2x1,pingpong")
