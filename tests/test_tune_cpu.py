"""Kernel variants and ``coda tune`` without a GPU (CI): the runtime's pick, the tune file, the
tune loop, and verify over every variant.

No compile, no GPU. A format-4 build is a shrunk spec plus ``tests.test_verify_cpu.fake_manifest``
(whose kernel steps carry one variant) with more variants added by :func:`add_variants`: the spec
lowered again at another ``BuildConfig`` gives that config's fields (its partial-buffer shapes),
the symbol gets the config's tag, as ``coda build --config A;B`` writes them. What a launch would
receive is caught by patching ``Chain._fn`` to a recorder (and the SM count to 132); the device
check is patched to the CPU, as in tests/test_runtime_cpu.py. The tune loop runs on the real
runtime with a scripted clock (as tests/test_bench_cpu.py drives bench): each kernel launch
announces its variant to the clock and takes the runtime's no-launch path, so the scripted
samples decide the winner (``tune.pick_winner``: a variant replaces the fallback only with a median
``margin`` below the fallback's and a p80 below the fallback's median).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, replace

import pytest
import torch
from click.testing import CliRunner

from coda_spec import artifact, cli, runtime
from coda_spec import tune as T
from coda_spec.artifact import eval_shape
from coda_spec.artifact import tune_table as TT
from coda_spec.bench.driver import Options
from coda_spec.check.frontend import check_source, with_dims
from coda_spec.check.source import parse_text
from coda_spec.config import BuildConfig, config_tag, config_text
from coda_spec.lower import module as lower_module
from coda_spec.runtime import Chain, checks
from coda_spec.runtime.launch import Launcher
from coda_spec.verify import report as R
from coda_spec.verify import run as V
from tests.conftest import ROOT
from tests.emulate import emulate, emulate_compiled
from tests.test_bench_cpu import FakeClock
from tests.test_runtime_cpu import _inputs, _shrunk, make_build
from tests.test_verify_cpu import FakeChain, fake_manifest

V0 = config_text(BuildConfig().key())  # 128x256,cluster=2x1,cooperative: the fallback
PP = BuildConfig(tile_n=128, pingpong=True)  # 128x128,cluster=2x1,pingpong
C1 = BuildConfig(tile_n=128, cluster_m=1)  # 128x128,cluster=1x1,cooperative
V1, V2 = config_text(PP.key()), config_text(C1.key())
STATIC = {"D": 512, "F": 512}  # rmsnorm_chain as make_build shrinks it
GPU = "NVIDIA H200"
SMS = 132


def _majors(step) -> dict:
    """The operand majors the runtime's views have (fake_manifest's are placeholders)."""
    (_, a_tr), (_, b_tr) = step["a"], step["b"]
    return {"A": "col" if a_tr else "row", "B": "row" if b_tr else "col"}


def add_variants(manifest: dict, checked, *configs) -> dict:
    """``manifest`` (format 4, one variant per kernel) with a variant per extra config: fields
    lowered at that config, a tagged symbol; every variant gets the operands' real majors."""
    kernels = [s for s in manifest["steps"] + manifest["backward_steps"] if s["kind"] == "kernel"]
    for s in kernels:
        s["majors"] = _majors(s)
        s["variants"][0]["majors"] = _majors(s)
    for cfg in configs:
        lowered = {k.step: k for k in lower_module.lower_spec(checked, cfg).kernels}
        manifest["configs"].append(cfg.key())
        for s in kernels:
            base = s["variants"][0]
            s["variants"].append(
                dict(
                    base,
                    name=config_text(cfg.key()),
                    config=cfg.key(),
                    symbol=f"{base['symbol']}__{config_tag(cfg.key())}",
                    fields=[asdict(f) for f in lowered[s["name"]].fields],
                )
            )
    return manifest


def variant_build(tmp_path, name="rmsnorm_chain", configs=(PP, C1)):
    d, checked = make_build(tmp_path, name)
    m = add_variants(json.loads((d / artifact.MANIFEST).read_text()), checked, *configs)
    artifact.write_manifest(d, m)
    return d, checked


def table(build: str, kernels: dict, gpu: str = GPU) -> dict:
    """A tune file's data: ``kernels`` = {step: [(dims, m_max, config text), ...]}."""
    rows = {
        step: [{"dims": dims, "m_max": m, "config": c, "ms": 1.0} for dims, m, c in entries]
        for step, entries in kernels.items()
    }
    return {"format": 1, "builds": {build: {"spec": "x", "gpu": gpu, "kernels": rows}}}


@pytest.fixture
def cpu(monkeypatch):
    """The device check accepts CPU tensors and the device is called NVIDIA H200; compiled
    host steps and finalizes run in torch (a CPU has no cubin to launch)."""
    monkeypatch.setattr(checks, "current_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(checks, "device_name", lambda device: GPU)
    emulate_compiled(monkeypatch)
    monkeypatch.delenv(TT.ENV, raising=False)


@pytest.fixture
def launches(monkeypatch, cpu):
    """Every launch is recorded: (symbol, epilogue argument shapes, max_active_clusters)."""
    calls = []

    def fn_for(self, symbol):
        def launch(a, b, d, c, epi, sched, *rest):
            shapes = [tuple(x.shape) if isinstance(x, torch.Tensor) else x for x in epi]
            calls.append((symbol, shapes, sched[0]))

        return launch

    monkeypatch.setattr(Launcher, "function", fn_for)
    monkeypatch.setattr(Launcher, "sm_count", lambda self, dev: SMS)
    return calls


# -- variants as the runtime reads them --------------------------------------------------------


def test_variant_names_fallback_first(tmp_path, cpu):
    d, _ = variant_build(tmp_path)
    chain = runtime.load(d, tuned=False)
    assert chain.manifest.format == 9
    assert chain.variant_names("out_proj") == [V0, V1, V2]
    assert chain.selected_variants({"M": 64}) == {"out_proj": V0, "up_proj": V0}
    forced = chain.with_variants({"out_proj": 2, "up_proj": V1})
    assert forced.selected_variants({"M": 64}) == {"out_proj": V2, "up_proj": V1}
    assert chain.selected_variants({"M": 64})["out_proj"] == V0  # the original is unchanged


@pytest.mark.parametrize(
    "choice, message",
    [({"finalize_r": 0}, "no kernel step 'finalize_r'"), ({"out_proj": 3}, "has 3 variant")],
    ids=["not-a-kernel", "no-such-index"],
)
def test_with_variants_refuses_what_the_build_lacks(choice, message, tmp_path):
    d, _ = variant_build(tmp_path)
    with pytest.raises(ValueError, match=message):
        runtime.load(d, tuned=False).with_variants(choice)


def test_with_variants_refuses_an_unknown_name(tmp_path):
    d, _ = variant_build(tmp_path)
    with pytest.raises(ValueError, match=r"no variant '256x128.*it has 128x256"):
        runtime.load(d, tuned=False).with_variants({"out_proj": "256x128,cluster=2x1,x"})


# -- the pick from a tune table ----------------------------------------------------------------

TWO_BUCKETS = [(STATIC, 1024, V1), (STATIC, 8192, V2)]
PICKS = [  # (id, out_proj's entries, M, the variant out_proj runs)
    ("bucket-below", TWO_BUCKETS, 64, V1),
    ("bucket-at-m_max", TWO_BUCKETS, 1024, V1),
    ("bucket-next", TWO_BUCKETS, 1025, V2),
    ("above-every-m_max", TWO_BUCKETS, 100000, V2),
    ("other-static-dims", [({"D": 1024, "F": 512}, 1024, V1)], 64, V0),
    ("config-not-built", [(STATIC, 1024, "256x128,cluster=2x1,cooperative")], 64, V0),
    ("unbuilt-bucket-skipped", [(STATIC, 1024, "256x128"), (STATIC, 8192, V2)], 64, V2),
    ("no-entry", [], 64, V0),
]


@pytest.mark.parametrize("entries, m, want", [p[1:] for p in PICKS], ids=[p[0] for p in PICKS])
def test_pick_from_the_tune_table(entries, m, want, tmp_path, cpu):
    d, _ = variant_build(tmp_path)
    data = table(d.name, {"out_proj": entries} if entries else {})
    chain = runtime.load(d, tuned=data)
    assert chain.selected_variants({"M": m}) == {"out_proj": want, "up_proj": V0}


def test_entries_of_another_build_are_not_used(tmp_path, cpu):
    """A tune table with no entry for this build (a rebuild changes the build's hash) says so
    once, at load, naming coda tune; copies of the chain (verify's re-sized and forced ones) and
    calls do not warn again."""
    d, _ = variant_build(tmp_path)
    other = table("rmsnorm_chain-111111111111", {"out_proj": TWO_BUCKETS})
    with pytest.warns(UserWarning, match=r"no tune entry for build rmsnorm_chain-0+ .*coda tune"):
        chain = runtime.load(d, tuned=other)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert chain.selected_variants({"M": 64})["out_proj"] == V0
        chain.with_variants({"out_proj": 1}).with_manifest(chain.manifest)


def test_no_warning_without_tune_files_or_variants(tmp_path, cpu, monkeypatch):
    """Nothing to say when no tune file is found, or when no kernel has a second variant."""
    d, _ = variant_build(tmp_path)
    (tmp_path / "one").mkdir()
    one, _ = make_build(tmp_path / "one", "rmsnorm_chain")  # one variant per kernel
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runtime.load(d)  # no ./tuned, no $CODA_TUNED
        runtime.load(one, tuned=table("rmsnorm_chain-111111111111", {"out_proj": TWO_BUCKETS}))


def test_the_shipped_table_warns_only_for_a_spec_it_was_tuned_for(tmp_path, cpu, monkeypatch):
    """The package's table (``BUNDLED_DIR``) is searched last; with no file of the user's, a
    build it has no entry for warns only when the table holds another build of the same spec
    (the bundled specs rebuilt at another hash), naming the shipped file."""
    d, _ = variant_build(tmp_path)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setattr(TT, "BUNDLED_DIR", shipped)
    monkeypatch.chdir(tmp_path)
    (shipped / "h200.json").write_text(json.dumps(table("other_spec-111111111111", {})))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runtime.load(d)
    (shipped / "h200.json").write_text(json.dumps(table("rmsnorm_chain-111111111111", {})))
    with pytest.warns(UserWarning, match=r"no tune entry for build rmsnorm_chain-.* in .*h200"):
        runtime.load(d)


def test_a_latest_link_reads_the_builds_own_entries(tmp_path, cpu):
    d, _ = variant_build(tmp_path)
    latest = tmp_path / "rmsnorm_chain-latest"
    latest.symlink_to(d.name)
    chain = runtime.load(latest, tuned=table(d.name, {"out_proj": TWO_BUCKETS}))
    assert chain.directory.name == d.name
    assert chain.selected_variants({"M": 64})["out_proj"] == V1


def test_a_forced_variant_beats_the_table(tmp_path, cpu):
    d, _ = variant_build(tmp_path)
    chain = runtime.load(d, tuned=table(d.name, {"out_proj": TWO_BUCKETS}))
    assert chain.with_variants({"out_proj": 0}).selected_variants({"M": 64})["out_proj"] == V0


def test_another_gpus_file_warns_and_is_not_used(tmp_path, cpu):
    d, _ = variant_build(tmp_path)
    path = tmp_path / "h100.json"
    path.write_text(json.dumps(table(d.name, {"out_proj": TWO_BUCKETS}, gpu="NVIDIA H100")))
    chain = runtime.load(d, tuned=path)
    with pytest.warns(UserWarning, match=r"h100\.json were measured on NVIDIA H100.*NVIDIA H200"):
        assert chain.selected_variants({"M": 64})["out_proj"] == V0


def test_files_of_two_gpus_the_matching_one_is_used(tmp_path, cpu):
    d, _ = variant_build(tmp_path)
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    other = table(d.name, {"out_proj": [(STATIC, 1024, V2)]}, gpu="NVIDIA H100")
    (tuned / "h100.json").write_text(json.dumps(other))
    (tuned / "h200.json").write_text(json.dumps(table(d.name, {"out_proj": TWO_BUCKETS})))
    chain = runtime.load(d, tuned=tuned)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert chain.selected_variants({"M": 64})["out_proj"] == V1


def test_default_search_path(tmp_path, cpu, monkeypatch):
    """./tuned/*.json under the current directory; $CODA_TUNED instead when set; tuned=False:
    none."""
    d, _ = variant_build(tmp_path)
    work = tmp_path / "work"
    (work / "tuned").mkdir(parents=True)
    (work / "tuned" / "h200.json").write_text(json.dumps(table(d.name, {"out_proj": TWO_BUCKETS})))
    elsewhere = tmp_path / "ci.json"
    elsewhere.write_text(json.dumps(table(d.name, {"out_proj": [(STATIC, 64, V2)]})))
    monkeypatch.chdir(work)
    assert runtime.load(d).selected_variants({"M": 64})["out_proj"] == V1
    assert runtime.load(d, tuned=False).selected_variants({"M": 64})["out_proj"] == V0
    monkeypatch.setenv(TT.ENV, str(elsewhere))
    assert runtime.load(d).selected_variants({"M": 64})["out_proj"] == V2
    monkeypatch.setenv(TT.ENV, str(tmp_path / "missing.json"))
    with pytest.raises(FileNotFoundError, match="missing.json"):
        runtime.load(d)


def _with(**extra) -> str:
    """A one-entry tune file whose entry has ``extra`` fields."""
    data = table("b", {"k": [(STATIC, 1, V1)]})
    data["builds"]["b"]["kernels"]["k"][0].update(extra)
    return json.dumps(data)


MALFORMED = [  # (id, file text, what the message says)
    ("not-json", "{", "invalid JSON"),
    ("format", json.dumps({"format": 2, "builds": {}}), "format is 2"),
    ("no-gpu", json.dumps({"format": 1, "builds": {"b": {"kernels": {}}}}), "gpu must name"),
    ("m_max", json.dumps(table("b", {"k": [(STATIC, -1, V1)]})), "m_max must be"),
    ("dims", json.dumps(table("b", {"k": [({"D": "4k"}, 1, V1)]})), "dims must map"),
    ("config", json.dumps(table("b", {"k": [(STATIC, 1, "fast")]})), "unknown config item"),
    ("margin-1", _with(margin=1), "margin must be a number, 0 <= margin < 1"),
    ("margin-text", _with(margin="3%"), "margin must be a number"),
    ("rounds", _with(rounds=0), "rounds must be a positive integer"),
    ("spread-one-number", _with(spread={V1: 0.5}), r"spread must map config texts to \[p20"),
    ("spread-three", _with(spread={V1: [0.4, 0.5, 0.6]}), "spread must map"),
]


@pytest.mark.parametrize("text, why", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_tune_file_names_its_path(text, why, tmp_path):
    d, _ = variant_build(tmp_path)
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"{path}: not a coda tune file.*{why}"):
        runtime.load(d, tuned=path)


OLD_ENTRY = {  # as the 2026-12-01 H200 run wrote it: no margin, rounds or spread
    "dims": STATIC,
    "m_max": 16384,
    "config": V2,
    "ms": 0.25,
    "candidates": {V0: 0.2992, V1: 0.2506, V2: 0.25},
}
NEW_ENTRY = dict(
    OLD_ENTRY,
    config=V1,
    margin=0.03,
    rounds=30,
    spread={V0: [0.29, 0.31], V1: [0.24, 0.26], V2: None},
)


@pytest.mark.parametrize("entry, want", [(OLD_ENTRY, V2), (NEW_ENTRY, V1)], ids=["old", "new"])
def test_entries_with_and_without_the_margin_fields_load(entry, want, tmp_path, cpu):
    d, _ = variant_build(tmp_path)
    data = {"format": 1, "builds": {d.name: {"gpu": GPU, "kernels": {"out_proj": [entry]}}}}
    path = tmp_path / "h200.json"
    path.write_text(json.dumps(data))
    (row,) = TT.read_file(path)["builds"][d.name]["kernels"]["out_proj"]
    assert row == entry  # validated, nothing added or dropped
    assert runtime.load(d, tuned=path).selected_variants({"M": 64})["out_proj"] == want


# -- what reaches the launch -------------------------------------------------------------------


@pytest.mark.parametrize(
    "choice, symbol, ss, clusters",
    [
        (None, "coda_out_proj", (64, 2), SMS // 2),
        ({"out_proj": V1}, "coda_out_proj__128x128_c2x1_pp", (64, 4), SMS // 2),
        ({"out_proj": V2}, "coda_out_proj__128x128_c1x1_coop", (64, 4), SMS),
    ],
    ids=["fallback", "pingpong-2x1", "cooperative-1x1"],
)
def test_the_chosen_variant_reaches_the_launch(choice, symbol, ss, clusters, tmp_path, launches):
    """Symbol, partial-buffer shape (ss: M x D/tile_n N-tiles) and max_active_clusters follow
    the variant; the finalize step folds whatever width the variant wrote."""
    d, checked = variant_build(tmp_path)
    chain = runtime.load(d, tuned=False)
    chain = chain.with_variants(choice) if choice else chain
    _, low = _inputs(checked, 64)
    env = chain.run(dict(low))
    (out_proj, up_proj) = launches
    assert out_proj[0] == symbol and out_proj[2] == clusters
    assert ss in out_proj[1] and tuple(env["ss"].shape) == ss
    assert tuple(env["r"].shape) == (64,)
    assert up_proj[0] == "coda_up_proj" and up_proj[2] == SMS // 2


def test_the_tuned_variant_reaches_the_launch(tmp_path, launches):
    d, checked = variant_build(tmp_path)
    data = table(d.name, {"out_proj": TWO_BUCKETS, "up_proj": [(STATIC, 64, V2)]})
    chain = runtime.load(d, tuned=data)
    for m in (64, 2048):
        _, low = _inputs(checked, m)
        chain.run(dict(low))
    assert [(s, c) for s, _, c in launches] == [
        ("coda_out_proj__128x128_c2x1_pp", SMS // 2),  # M = 64 <= 1024
        ("coda_up_proj__128x128_c1x1_coop", SMS),
        ("coda_out_proj__128x128_c1x1_coop", SMS),  # M = 2048: the 8192 bucket
        ("coda_up_proj__128x128_c1x1_coop", SMS),  # only m_max 64: the largest
    ]


# -- the tune loop (fake clock) and the tune file ----------------------------------------------


class VariantClock(FakeClock):
    """Samples scripted per (kernel, variant): ``script["out_proj", V1] = [ms, ...]``."""


@pytest.fixture
def announced(monkeypatch, cpu):
    """Each kernel launch tells the clock which variant runs, then takes the no-launch path."""
    clock = VariantClock()

    def tell(chain, step, call):
        if step.kind == "kernel":
            v = chain._variant(step, call.sizes, call.device)
            clock.calling((step.name, v.name))

    emulate(monkeypatch, before=tell)
    return clock


def _tune(d, clock, ms=(64,), rounds=3, margin=T.DEFAULT_MARGIN):
    chain = runtime.load(d, tuned=False)
    opts = Options(
        ms=ms, baselines=(), rounds=rounds, warmup=1, device="cpu", kernels=False, ruler="isolated"
    )
    said = []
    run = T.run_tune(
        [(d, chain)], opts, "coda tune x", said.append, clock, (GPU, "999.1"), margin=margin
    )
    return run, said


def _row(text: str, kernel: str) -> str:
    """The table's row of ``kernel``, its runs of spaces squeezed to one."""
    (row,) = [line for line in text.splitlines() if line.strip().startswith(kernel + " ")]
    return " ".join(row.split())


def test_tune_picks_the_fastest_clear_median(tmp_path, announced):
    d, _ = variant_build(tmp_path)
    announced.script = {
        ("out_proj", V0): [3.0, 3.0, 9.0],
        ("out_proj", V1): [1.0, 1.2, 1.0],  # median 1, p80 1.12 < 3: the winner
        ("out_proj", V2): [2.0, 2.0, 2.0],
        ("up_proj", V0): [1.0, 1.0, 1.0],  # the fallback keeps a tie
        ("up_proj", V1): [4.0, 4.0, 4.0],
        ("up_proj", V2): [1.0, 1.0, 1.0],
    }
    run, said = _tune(d, announced)
    assert run.gpu == GPU and run.notes == () and run.margin == 0.03
    got = {r.kernel: (r.winner, r.ms, r.speedup) for r in run.results}
    assert got["out_proj"] == (V1, {V0: 3.0, V1: 1.0, V2: 2.0}, 3.0)
    assert got["up_proj"][0] == V0 and got["up_proj"][2] == 1.0
    out_proj = next(r for r in run.results if r.kernel == "out_proj")
    assert out_proj.spread[V1] == pytest.approx((1.0, 1.12))  # p20, p80 of 1.0, 1.0, 1.2
    assert out_proj.rounds == 3 and out_proj.margin == 0.03
    timed = [c for c in announced.calls if c[0] == "out_proj"]
    assert {v for _, v in timed} == {V0, V1, V2}  # every variant of the kernel ran
    assert f"out_proj: {V1} (won by 66.7%)" in "\n".join(said)
    text = T.render_table(run)
    assert f"v1  {V1}" in text and "3.00x" in text
    assert "median is >= 3% lower and its p80 < v0's median" in text.splitlines()[0]
    assert _row(text, "out_proj").endswith("3.0000 1.0000 2.0000 v1 3.00x won by 66.7%")
    assert _row(text, "up_proj").endswith(
        "v0 1.00x fallback kept: fastest (best other v2 not faster)"
    )


# (id, out_proj's samples per variant (5 rounds), the winner, why the table says it won)
MARGIN_CASES = [
    (
        "0.2%-is-noise",  # f1 D=2048 on the H200: a 0.2% lower median picked, the chain slower
        {V0: [1.0] * 5, V1: [0.998] * 5, V2: [1.2] * 5},
        V0,
        "fallback kept: best other v1 0.2% faster < 3% margin",
    ),
    (
        "10%-tight-spread",
        {V0: [1.0] * 5, V1: [0.9, 0.91, 0.9, 0.89, 0.9], V2: [0.95] * 5},
        V1,
        "won by 10.0%",
    ),
    (
        "10%-but-p80-above",  # median 0.9, p80 1.2 >= the fallback's 1.0
        {V0: [1.0] * 5, V1: [0.9, 1.2, 0.9, 1.2, 0.9], V2: [1.1] * 5},
        V0,
        "fallback kept: v1 10.0% faster but its p80 is not below the fallback's median",
    ),
    (
        "next-clear-one-wins",  # v1 fails the p80 test; v2 clears both: the smallest clear one
        {V0: [1.0] * 5, V1: [0.9, 1.2, 0.9, 1.2, 0.9], V2: [0.95, 0.96, 0.95, 0.94, 0.95]},
        V2,
        "won by 5.0%",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "samples, want, why", [c[1:] for c in MARGIN_CASES], ids=[c[0] for c in MARGIN_CASES]
)
def test_tune_keeps_the_fallback_without_a_clear_win(samples, want, why, tmp_path, announced):
    d, _ = variant_build(tmp_path)
    announced.script = {("out_proj", v): list(xs) for v, xs in samples.items()}
    run, _ = _tune(d, announced, rounds=5)
    out_proj = next(r for r in run.results if r.kernel == "out_proj")
    assert out_proj.winner == want
    assert _row(T.render_table(run), "out_proj").endswith(why)
    assert T.merge(None, run)["builds"][d.name]["kernels"]["out_proj"][0]["config"] == want


@pytest.mark.slow
def test_the_margin_is_an_option(tmp_path, announced):
    """A 10% win with tight spread loses to a 15% margin and wins at margin 0."""
    d, _ = variant_build(tmp_path)
    samples = {V0: [1.0] * 3, V1: [0.9] * 3, V2: [1.1] * 3}
    for margin, want in ((0.15, V0), (0.0, V1)):
        announced.script = {("out_proj", v): list(xs) for v, xs in samples.items()}
        run, said = _tune(d, announced, margin=margin)
        assert [r.winner for r in run.results if r.kernel == "out_proj"] == [want]
        assert f"margin {margin * 100:g}%" in said[0]


PICK_CASES = [  # (id, medians, p80s, margin, the winner, Pick.rule)
    ("fallback-failed-smallest-median", {V1: 0.9, V2: 0.8}, {V2: 5.0}, 0.03, V2, "no-fallback"),
    ("fallback-failed-tie-earlier", {V1: 0.8, V2: 0.8}, {}, 0.03, V1, "no-fallback"),
    ("nothing-ran", {}, {}, 0.03, None, "none"),
    ("only-the-fallback-ran", {V0: 1.0}, {}, 0.03, V0, "kept"),
    ("2.9%-under-a-3%-margin", {V0: 1.0, V1: 0.971}, {V1: 0.971}, 0.03, V0, "kept"),
    ("3.1%-over-it", {V0: 1.0, V1: 0.969}, {V1: 0.98}, 0.03, V1, "won"),
    ("margin-0-tie-kept", {V0: 1.0, V1: 1.0}, {V1: 1.0}, 0.0, V0, "kept"),
    ("margin-0-any-clear-win", {V0: 1.0, V1: 0.999}, {V1: 0.9995}, 0.0, V1, "won"),
    ("p80-equal-to-base-is-not-below", {V0: 1.0, V1: 0.5}, {V1: 1.0}, 0.03, V0, "kept"),
    ("no-p80-counts-as-median", {V0: 1.0, V1: 0.9}, {}, 0.03, V1, "won"),
    ("smallest-clear-median", {V0: 1.0, V1: 0.9, V2: 0.8}, {V1: 0.9, V2: 0.85}, 0.03, V2, "won"),
]


@pytest.mark.parametrize(
    "ms, p80, margin, want, rule", [c[1:] for c in PICK_CASES], ids=[c[0] for c in PICK_CASES]
)
def test_pick_winner(ms, p80, margin, want, rule):
    got = T.pick_winner((V0, V1, V2), ms, p80, margin)
    assert (got.winner, got.rule) == (want, rule)


def test_a_failed_fallback_gives_the_smallest_median(tmp_path):
    """The fallback could not run: the margin has nothing to measure against; the smallest
    median wins and the entry records the fallback as null."""
    r = T.KernelTune(
        build="b-1",
        spec="b",
        kernel="k",
        sizes={"M": 64, **STATIC},
        static=STATIC,
        m=64,
        names=(V0, V1, V2),
        ms={V1: 0.9, V2: 0.8},
        failed={V0: "RuntimeError: no such kernel"},
        spread={V1: (0.85, 0.95), V2: (0.7, 2.0)},
        rounds=30,
    )
    assert r.winner == V2 and r.speedup is None
    entry = r.entry()
    assert entry["candidates"] == {V0: None, V1: 0.9, V2: 0.8}
    assert entry["spread"] == {V0: None, V1: [0.85, 0.95], V2: [0.7, 2.0]}
    assert (entry["margin"], entry["rounds"]) == (0.03, 30)
    run = T.TuneRun(gpu=GPU, driver="1", date="d", command="c", rounds=30, results=(r,))
    row = _row(T.render_table(run), "k")
    assert row.endswith("failed 0.9000 0.8000 v2 - fallback did not run: smallest median")
    assert TT.validate(T.merge(None, run))["builds"]["b-1"]["kernels"]["k"][0]["config"] == V2


def test_kernels_with_one_variant_are_not_timed(tmp_path, announced):
    d, _ = make_build(tmp_path, "rmsnorm_chain")  # format 4, one variant each
    run, said = _tune(d, announced)
    assert run.results == ()
    assert "nothing to tune" in " ".join(said)
    assert "nothing tuned" in T.render_table(run)


@pytest.mark.slow
def test_tune_file_is_merged(tmp_path, announced):
    """A new run replaces the entry at the same kernel, dims and M, keeps the other Ms and the
    other builds, and the runtime then picks from the file."""
    d, checked = variant_build(tmp_path)
    announced.script = {("out_proj", V2): [0.5] * 6, ("up_proj", V1): [0.5] * 6}
    out = tmp_path / "tuned" / "h200.json"
    old = table(d.name, {"out_proj": [(STATIC, 64, V1), (STATIC, 8192, V1)]})
    old["builds"]["f8_scale-222222222222"] = table("x", {"k": [({}, 1, V0)]})["builds"]["x"]
    out.parent.mkdir()
    out.write_text(json.dumps(old))
    run, _ = _tune(d, announced, ms=(64, 2048), rounds=3)
    T.write_file(out, T.merge(TT.read_file(out), run))
    data = json.loads(out.read_text())
    assert set(data["builds"]) == {d.name, "f8_scale-222222222222"}
    b = data["builds"][d.name]
    assert b["gpu"] == GPU and b["driver"] == "999.1" and b["command"] == "coda tune x"
    assert b["spec"] == "rmsnorm_chain"
    assert [(e["m_max"], e["config"]) for e in b["kernels"]["out_proj"]] == [
        (64, V2),
        (2048, V2),
        (8192, V1),
    ]
    assert b["kernels"]["up_proj"][0]["candidates"] == {V0: 1.0, V1: 0.5, V2: 1.0}
    assert b["kernels"]["up_proj"][0]["spread"] == {V0: [1.0, 1.0], V1: [0.5, 0.5], V2: [1.0, 1.0]}
    assert (b["kernels"]["up_proj"][0]["margin"], b["kernels"]["up_proj"][0]["rounds"]) == (0.03, 3)
    assert "margin" not in b["kernels"]["out_proj"][2]  # the old 8192 entry is kept as it was
    assert b["kernels"]["up_proj"][0]["dims"] == STATIC
    chain = runtime.load(d, tuned=out)
    assert chain.selected_variants({"M": 4096}) == {"out_proj": V1, "up_proj": V1}


def test_a_file_of_another_gpu_is_replaced_not_mixed(tmp_path, announced):
    d, _ = variant_build(tmp_path)
    old = table(d.name, {"out_proj": [(STATIC, 8192, V1)]}, gpu="NVIDIA H100")
    run, _ = _tune(d, announced)
    merged = T.merge(old, run)
    b = merged["builds"][d.name]
    assert b["gpu"] == GPU and [e["m_max"] for e in b["kernels"]["out_proj"]] == [64]


def test_gpu_slug():
    assert T.gpu_slug("NVIDIA H200") == "h200"
    assert T.gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert str(T.default_out("NVIDIA H200")) == "tuned/h200.json"


def _cli(args):
    return CliRunner().invoke(cli.main, ["tune", *args])


def test_tune_without_gpu_exits_4(monkeypatch, tmp_path):
    from tests.test_cli import _fake_build

    spec = ROOT / "specs" / "f8_scale.yaml"
    _fake_build(tmp_path, spec)
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    res = _cli([str(spec), "--builds", str(tmp_path)])
    assert res.exit_code == 4, res.output
    assert "coda tune times kernel variants on a CUDA GPU; none here" in res.output


def test_tune_command_writes_the_file(tmp_path, announced, monkeypatch):
    """Through the CLI (a GPU pretended, the fake clock behind run_tune): the table is printed
    and the file written where --out says, its parent made."""
    d, _ = variant_build(tmp_path)
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    real = T.run_tune

    def run_tune(targets, opts, command, margin):
        opts = replace(opts, device="cpu")  # inputs drawn on the CPU
        return real(targets, opts, command, lambda msg: None, announced, (GPU, "999.1"), margin)

    monkeypatch.setattr(T, "run_tune", run_tune)
    out = tmp_path / "new" / "dir" / "t.json"
    argv = [str(d), "--m", "64", "--rounds", "2", "--warmup", "1", "--margin", "0.05", "--isolated"]
    res = _cli([*argv, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "winner  speedup  why" in res.output and f"wrote {out}" in res.output
    kernels = json.loads(out.read_text())["builds"][d.name]["kernels"]
    assert set(kernels) == {"out_proj", "up_proj"}
    e = kernels["out_proj"][0]
    assert (e["config"], e["margin"], e["rounds"]) == (V0, 0.05, 2)  # every sample 1.0: a tie
    assert set(e["spread"]) == set(e["candidates"]) == {V0, V1, V2}


def test_tune_defaults_sustained_3_rounds_isolated_30_and_a_3_percent_margin(
    tmp_path, monkeypatch, cpu
):
    """The sustained ruler is the default (3 rounds of 0.5-s streams); --isolated keeps the
    old ruler and its 30 rounds; --rounds overrides either."""
    d, _ = variant_build(tmp_path)
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    seen = []

    def run_tune(targets, opts, command, margin):
        seen.append((opts.ruler, opts.rounds, opts.sustain_s, margin))
        return T.TuneRun(gpu=GPU, driver="", date="", command=command, rounds=opts.rounds)

    monkeypatch.setattr(T, "run_tune", run_tune)
    for argv in ([], ["--isolated"], ["--rounds", "5", "--sustain-s", "0.7"]):
        res = _cli([str(d), *argv])
        assert res.exit_code == 0, res.output
    assert seen == [
        ("sustained", 3, 0.5, 0.03),
        ("isolated", 30, 0.5, 0.03),
        ("sustained", 5, 0.7, 0.03),
    ]
    assert T.DEFAULT_ROUNDS == 30 and T.Args(targets=()).margin == 0.03
    assert (T.Args(targets=()).ruler, T.Args(targets=()).rounds) == ("sustained", None)


@pytest.mark.parametrize("value", ["1", "1.5", "-0.01", "nan"])
@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "no-gpu"])
def test_tune_margin_out_of_range_exits_2(value, gpu, monkeypatch):
    """Checked before anything runs, GPU or not: exit 2 and one line naming the option."""
    monkeypatch.setattr(cli, "_has_gpu", lambda: gpu)
    res = _cli(["x", "--margin", value])
    assert res.exit_code == 2, res.output
    assert f"error: --margin {float(value)!r}: must be a fraction at least 0 and below 1" in (
        res.output
    )
    with pytest.raises(ValueError, match="--margin"):
        T.Args(targets=("x",), margin=float(value))


def test_tune_margin_not_a_number_exits_2(monkeypatch):
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    res = _cli(["x", "--margin", "3%"])
    assert res.exit_code == 2 and "Invalid value for '--margin'" in res.output, res.output


@pytest.mark.parametrize(
    "argv, msg", [(["--m", "16k", "x"], "--m '16k'"), (["x", "--dims", "D"], "NAME=INT")]
)
def test_tune_bad_arguments_exit_2(argv, msg, monkeypatch):
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    res = _cli(argv)
    assert res.exit_code == 2 and msg in res.output, res.output


# -- verify over every variant -----------------------------------------------------------------


class VariantFake(FakeChain):
    """FakeChain with the runtime's variant choice: ``with_variants`` goes through a real
    ``Chain`` (so verify's choice must be one the runtime accepts) and the fake then writes the
    partial buffers at the chosen variants' shapes. ``log``: (dims, {step: variant}) per run."""

    forced: dict = {}

    def with_manifest(self, manifest, checked=None):
        other = type(self)(checked or self._checked, self.directory, self.fault, manifest)
        other.log, other.forced = self.log, dict(self.forced)
        return other

    def with_variants(self, choice):
        real = Chain(self.directory, self.manifest, tuned=False).with_variants(choice)
        names, steps = {}, []
        for s in self.manifest.steps:
            if s.kind == "kernel":
                v = real._variant(s, {}, None)
                s, names[s.name] = replace(s, fields=v.fields), v.name
            steps.append(s)
        other = self.with_manifest(replace(self.manifest, steps=tuple(steps)))
        other.forced = names
        return other

    def run(self, inputs, poison=False):
        out = super().run(inputs, poison)
        self.log[-1] = (self.log[-1][0], self.forced)
        return out


@pytest.fixture
def quick(monkeypatch):
    """verify's shape cases at small M (CPU), and no CPU algebra proof (not under test)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(V, "REAL_M", 128)
    monkeypatch.setattr(V, "RAGGED_M", 100)
    monkeypatch.setattr(V, "SMALL_M", 8)
    monkeypatch.setattr(V, "math_proof", lambda *a, **k: ())


def _variant_checked(dims):
    path = ROOT / "specs" / "rmsnorm_chain.yaml"
    return check_source(parse_text("specs/rmsnorm_chain.yaml", _shrunk(path, dims)))


@pytest.mark.slow
def test_verify_runs_every_variant_and_labels_it(tmp_path, quick, monkeypatch):
    """Two variants: every case runs once per variant, labelled with its config (the report
    round by round); partial buffers have that variant's shape; the ragged case is ragged for
    that variant's tile (D = 384 is off the 256 grid already, on the 128 grid: nudged to 360).
    The variants of a case run in a row and share its drawn inputs: one draw per case and
    size, four here, not six."""
    draws = []
    make_inputs = V.make_inputs

    def counted(spec, sizes, seed, *a, **k):
        draws.append(dict(sizes))
        return make_inputs(spec, sizes, seed, *a, **k)

    monkeypatch.setattr(V, "make_inputs", counted)
    checked = _variant_checked({"D": 384, "F": 512})
    fake = VariantFake(
        checked, tmp_path, manifest=add_variants(fake_manifest(checked), checked, PP)
    )
    report = V.verify_chain(fake, seed=3)
    assert report.passed, R.render_table(report)
    cases = list(dict.fromkeys(c.case for c in report.checks))
    assert cases == [f"{c} [{v}]" for v in (V0, V1) for c in ("real", "ragged", "small")]
    v0, v1 = {"out_proj": V0, "up_proj": V0}, {"out_proj": V1, "up_proj": V1}
    # case by case, in the order each case and size first appears
    assert [forced for _, forced in fake.log] == [v0, v1, v0, v0, v1, v1]
    assert [(d["M"], d["D"]) for d in draws] == [(128, 384), (100, 384), (8, 384), (100, 360)]
    ragged = {c.case: c.dims for c in report.checks if c.case.startswith("ragged")}
    assert ragged[f"ragged [{V0}]"]["D"] == 384 and ragged[f"ragged [{V1}]"]["D"] == 360
    ss = {c.case: c.shape for c in report.checks if c.output == "ss (partials)"}
    assert ss[f"real [{V0}]"] == (128, 2) and ss[f"real [{V1}]"] == (128, 3)
    assert ss[f"ragged [{V1}]"] == (100, 3)  # cdiv(360, 128)


@pytest.mark.slow
def test_verify_of_a_single_variant_build_is_unchanged(tmp_path, quick):
    checked = _variant_checked({"D": 384, "F": 512})
    fake = VariantFake(checked, tmp_path)
    report = V.verify_chain(fake, seed=3)
    assert [c.case for c in report.checks][:1] == ["real"]
    assert {c.case for c in report.checks} == {"real", "ragged", "small"}
    assert all(forced == {} for _, forced in fake.log)  # with_variants never called


def test_a_fault_in_one_variant_fails_that_variant(tmp_path, quick):
    checked = _variant_checked({"D": 256, "F": 256})
    m = add_variants(fake_manifest(checked), checked, PP)

    class Faulty(VariantFake):
        def run(self, inputs, poison=False):
            out = super().run(inputs, poison)
            if self.forced.get("out_proj") == V1:
                out["x1"].view(-1)[0] = float("nan")
            return out

    report = V.verify_chain(Faulty(checked, tmp_path, manifest=m), seed=3, only_small=True)
    assert [(c.case, c.output) for c in report.checks if not c.passed] == [(f"small [{V1}]", "x1")]


def test_ragged_dims_follow_the_tile():
    checked = _variant_checked({"D": 384, "F": 512})
    assert V.ragged_dims(checked, tile_n=256) == {"F": 488}  # D = 384 is off this grid already
    assert V.ragged_dims(checked, tile_n=128) == {"D": 360, "F": 488}
    cases = dict(V.cases(checked, None, tile_n=128))
    assert cases["ragged"]["D"] == 360


def test_resized_manifest_drops_what_a_primitive_refuses(tmp_path, monkeypatch):
    """Re-sizing replaces ``dims`` (each variant's fields are expressions of its own tile); a
    config a primitive's ``supports()`` refuses at the new dims is dropped from the re-sized
    manifest, without lowering (the fallback stays)."""
    from coda_spec import primitives

    checked = _variant_checked({"D": 512, "F": 512})
    m = add_variants(fake_manifest(checked), checked, PP, C1)
    fake = FakeChain(checked, tmp_path, manifest=artifact.Manifest.from_data(m))
    case = with_dims(checked, {"D": 256})
    real = primitives.registry()
    seen = []

    def refuse_c1(config, sizes, op):  # C1 "is not supported" at these dims
        seen.append(dict(sizes.dims))
        return "no cluster 1x1 here" if config.cluster_m == 1 else None

    store = replace(real["store"], supports=refuse_c1)
    monkeypatch.setattr(primitives, "registry", lambda: {**real, "store": store})
    monkeypatch.setattr(lower_module, "lower_kernel", None)  # nothing may lower
    out = V.resized_manifest(fake, case)
    assert dict(out.dims) == {"M": None, "D": 256, "F": 512} and {"D": 256, "F": 512} in seen
    step = next(s for s in out.steps if s.name == "out_proj")
    shapes = {v.name: next(f.shape for f in v.fields if f.tensor == "ss") for v in step.variants}
    assert shapes == {V0: ("M", "cdiv(D,256)"), V1: ("M", "cdiv(D,128)")}
    sizes = {"M": 64, "D": 256}
    assert [eval_shape(s, sizes) for s in shapes.values()] == [(64, 1), (64, 2)]
    assert len(m["steps"][0]["variants"]) == 3  # the build's own manifest is untouched


def test_a_variant_is_timed_with_the_finalizes_of_its_partials(tmp_path, announced, monkeypatch):
    """A narrower tile writes more partial columns for the finalize to fold, so the finalize's
    cost belongs to the variant: out_proj is timed with finalize_r, up_proj alone."""
    d, _ = variant_build(tmp_path)
    manifest = runtime.load(d, tuned=False).manifest
    step = {s.name: s for s in manifest.steps}
    assert [s.name for s in T.timed_steps(manifest, step["out_proj"])] == [
        "out_proj",
        "finalize_r",
    ]
    assert [s.name for s in T.timed_steps(manifest, step["up_proj"])] == ["up_proj"]
    folded = []
    real = Chain._finalize

    def finalize(self, step, call):  # the partial it folds, as this call's env holds it
        folded.append((step.name, step.of, call.env[step.of]))
        return real(self, step, call)

    monkeypatch.setattr(Chain, "_finalize", finalize)
    for v in (V0, V1, V2):
        announced.script["out_proj", v] = [1.0] * 4
        announced.script["up_proj", v] = [1.0] * 4
    _tune(d, announced)
    (_, _, first), timed = folded[0], folded[1:]  # the first: the chain's own run
    assert timed and all(name == "finalize_r" and of == "ss" for name, of, _ in timed)
    assert all(buf is not first for _, _, buf in timed)  # written again by the timed kernel
