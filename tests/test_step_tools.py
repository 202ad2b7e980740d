"""benchmarks/train_step.py and benchmarks/step_gemms.py on the CPU: everything but the GPU.

The GPU runs are issue 32's device calls (benchmarks/step_device.sh); here: the FLOP count
against the anchors' 67.3 TFLOP, modes with tune tables, argument checks, kernel families, the
telemetry of timed steps through a fake ``nvidia-smi``, the tables, the coda kernel-name mapping,
aten GEMM shapes, the profile's launch records and the prediction arithmetic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from benchmarks import step_gemms as G
from benchmarks import train_step as T
from coda_spec.bench import timing

ONE_B = SimpleNamespace(**{k: v for k, v in T.ONE_B.items() if k != "rope_parameters"})
CODA_KERNEL = (
    "kernel_cutlass_kernel_quackepiloguefrontendGemmMod_coda_dgrad_down_dswiglu_46035cf3c3638be9"
    "_p_c_sm9_object_at__TiledMMA_ThrLayoutVMNK1281111000_PermutationMNK____MMAAtom_0"
)
CUBLAS = "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT"


def test_model_flops_reproduce_the_anchors_67_3_tflop_at_1b_2x4096():
    flops = T.model_flops(ONE_B, 2, 4096)
    assert round(flops / 1e12, 1) == 67.3
    projections = 6 * (16 * (2048 * 48 * 64 + 2048 * 2048 + 3 * 2048 * 8192) + 128256 * 2048)
    assert flops - projections * 8192 == 6 * 16 * 2 * 4096**2 * 2048  # causal attention
    row = T.summary([100.0, 110.0, 105.0], flops, 8192, mhz=1485.0, watts=689.0)
    assert row["ms"] == 105.0 and row["tokens_per_s"] == 78019
    assert row["mfu"] == round(flops / 0.105 / 989.4e12, 4)
    assert row["j_per_step"] == round(689.0 * 0.105, 2)  # mean W x median s, as coda bench
    bare = T.summary([100.0], flops, 8192)
    assert bare["sm_mhz"] is None and bare["j_per_step"] is None  # unknown, never guessed


def test_a_sliding_window_layer_counts_the_keys_its_window_sees():
    full = SimpleNamespace(**{**vars(ONE_B), "num_hidden_layers": 2})
    both = SimpleNamespace(
        **vars(full), sliding_window=512, layer_types=["sliding_attention", "full_attention"]
    )
    per_layer = 12 * 2 * 32 * 64  # 12 * B * NH * HD per key a query sees
    window = 512 * 513 / 2 + (4096 - 512) * 512
    gap = T.model_flops(full, 2, 4096) - T.model_flops(both, 2, 4096)
    assert gap == per_layer * (4096 * 4096 / 2 - window)


@pytest.mark.parametrize("shape", sorted(T.FAMILY_SHAPES))
def test_a_family_shape_is_its_transformers_config(shape):
    pytest.importorskip("transformers")
    kind, cfg, b, s = T.FAMILY_SHAPES[shape]
    got = T.config(shape, 2)
    assert got.model_type == kind and got.num_hidden_layers == 2
    assert got.hidden_size == cfg["hidden_size"] and T.batch_seq(shape) == (b, s)


def test_modes_with_tables():
    assert T.split_mode("coda@old") == ("coda", "old")
    assert T.split_mode("coda-compile@none") == ("coda-compile", "none")
    assert T.split_mode("hf") == ("hf", None)
    for bad, why in (("hf@old", "only applies"), ("coda@new", "unknown table"), ("x", "unknown")):
        with pytest.raises(ValueError, match=why):
            T.split_mode(bad)
    assert T.tuned_arg(None, None, None) is None  # the search path
    assert T.tuned_arg(None, "none", None) is False
    assert T.tuned_arg("old", "new.json", "old.json") == "old.json"
    assert T.tuned_arg("none", "new.json", None) is False
    with pytest.raises(ValueError, match="--tuned-old"):
        T.tuned_arg("old", None, None)


def test_runs_shapes_by_modes_and_checks_every_argument_first(tmp_path):
    args = T.parser().parse_args(["--out", "x", "--modes", "coda,hf", "--shapes", "1b-1x8192,"])
    assert T.plan_runs(args) == [("1b-1x8192", "coda"), ("1b-1x8192", "hf")]
    args = T.parser().parse_args(["--out", "x", "--modes", "coda@old", "--tuned-old", "no.json"])
    with pytest.raises(ValueError, match="no tune file or directory no.json"):
        T.plan_runs(args)
    args.shapes = "1b-2x4096,2b"
    with pytest.raises(ValueError, match="unknown shape"):
        T.plan_runs(args)
    # a child takes the parent's arguments, then its own mode and shape (the last one wins)
    argv = ["--out", "x", "--shapes", "1b-2x4096,8b-layer4-2x4096", "--shape", "1b-2x4096"]
    child = T.parser().parse_args(T.child_argv(argv, "coda@old", "8b-layer4-2x4096")[2:])
    assert (child.child, child.shape) == ("coda@old", "8b-layer4-2x4096")


@pytest.mark.parametrize(
    "name, want",
    [
        ("Memcpy DtoD (Device -> Device)", "copy/cast/fill"),
        ("Memset (Device)", "copy/cast/fill"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
            "copy/cast/fill",
        ),  # noqa: E501
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>",
            "copy/cast/fill",
        ),  # noqa: E501
        ("triton_poi_fused__to_copy_0", "copy/cast/fill"),
        ("triton_poi_fused__to_copy_clone_12", "copy/cast/fill"),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "other"),
        ("void at::native::elementwise_kernel<128, 2, silu>", "other"),
        (CUBLAS, "GEMM"),
        (CODA_KERNEL, "GEMM"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", "attention"),
        ("finalize_r1", "coda host/finalize"),
    ],
)
def test_kernel_families(name, want):
    assert T.family(name, {"finalize_r1"}) == want


def test_the_step_table_and_breakdown():
    fams = T.breakdown({"GEMM": 95.91, "attention": 26.1, "copy/cast/fill": 1.234})
    assert list(fams) == [*T.FAMILIES, "total"] and fams["other"] == 0.0
    assert fams["total"] == 123.24
    ok = {"shape": "1b-2x4096", "mode": "coda@old", **T.summary([136.2], 67.34e12, 8192, 1485, 689)}
    ok.update(peak_gib=12.05, first_step_s=1.0, breakdown_ms=fams)
    bad = {"shape": "1b-2x4096", "mode": "hf", "error": ["Traceback", "CUDA out of memory"]}
    lines = T.table([ok, bad]).splitlines()
    assert len(lines) == 4 and all(ln.count("|") == lines[0].count("|") for ln in lines)
    cells = [c.strip() for c in lines[2].split("|")[1:-1]]
    assert cells[:9] == ["1b-2x4096", "coda@old", "136.2", "60,147", "50.0%", "12.05", "1485"] + [
        "689",
        "93.8",
    ]
    assert "failed: Traceback / CUDA out of memory" in lines[3]
    assert cells[-1] == "1.0"  # an eager mode: no cache state
    warm = T.table([{**ok, "first_step_s": 7.8, "inductor_cache_entries": 12}]).splitlines()[2]
    cold = T.table([{**ok, "first_step_s": 13.0, "inductor_cache_entries": 0}]).splitlines()[2]
    assert warm.endswith("| 7.8 (warm) |") and cold.endswith("| 13.0 |")


def test_the_inductor_cache_is_counted_where_torch_keeps_it(tmp_path, monkeypatch):
    """``inductor_cache_entries`` reads ``TORCHINDUCTOR_CACHE_DIR``: 0 for an empty cache, one
    per file under its ``fxgraph/`` folder."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert T.inductor_cache_entries() == 0
    for key in ("ab/fabc", "cd/fcde"):
        (tmp_path / "fxgraph" / key).mkdir(parents=True)
        (tmp_path / "fxgraph" / key / "entry").write_text("x")
    assert T.inductor_cache_entries() == 2


def test_timed_steps_sample_the_clock_through_a_fake_nvidia_smi(tmp_path, monkeypatch):
    """The sampler train_step opens (coda bench's, nvidia-smi here: no pynvml) reads a fake
    nvidia-smi that prints clock, power lines every 10 ms; the timed steps get their median
    clock and mean power."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        "if not any(a.startswith('--loop-ms') for a in sys.argv):\n"
        "    print('1500, 650.0'); sys.exit(0)\n"
        "i = 0\n"
        "while True:\n"
        "    print(f'{1400 + 10 * (i % 3)}, {680.0 + (i % 2) * 20}', flush=True)\n"
        "    i += 1; time.sleep(0.01)\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    sampler = timing.open_sampler(0, "")
    try:
        assert sampler.source.startswith("nvidia-smi (power.draw.instant")
        times, mhz, watts, last = T.timed_steps(
            lambda: time.sleep(0.05) or "loss", 6, sampler, sync=lambda: None
        )
    finally:
        sampler.close()
    assert len(times) == 6 and all(t >= 50 for t in times) and last == "loss"
    assert mhz == 1410.0 and 680.0 < watts < 700.0


@pytest.mark.slow
def test_a_mode_without_a_gpu_is_a_row_with_the_reason(tmp_path):
    """No GPU: the mode's process says so, the parent writes the row and the table, and exits 1
    (before issue 34 it exited 0: a device script read the failed run as a measurement)."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    out = tmp_path / "step.json"
    res = subprocess.run(
        [sys.executable, str(T.__file__), "--modes", "hf", "--out", str(out), "--budget-s", "60"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["error"] == ["train_step: no CUDA GPU here (torch.cuda.is_available() is False)"]
    assert (
        "[1/1] hf 1b-2x4096 fwdbwd" in res.stderr
        and "| hf | failed: train_step: no CUDA" in res.stdout
        and "1 measurement(s) failed: exit 1" in res.stderr
    )


def test_a_run_with_a_failed_measurement_exits_1():
    """A failed, timed-out or budget-cut mode fails the run; a clean run exits 0."""
    said = []
    ok = {"mode": "coda", "shape": "1b-2x4096", "ms": 1.0}
    assert T.failures([ok]) == [] and T.status([], said.append) == 0 and said == []
    rows = [ok, {"mode": "hf", "shape": "1b-2x4096", "error": ["no GPU", "x"]}]
    rows.append({"mode": "liger", "error": "budget"})
    assert T.failures(rows) == ["hf 1b-2x4096: no GPU / x", "liger: budget"]
    assert T.status(T.failures(rows), said.append) == 1
    assert (
        said[-1] == "2 measurement(s) failed: exit 1"
        and said[0] == "failed: hf 1b-2x4096: no GPU / x"
    )


def test_step_gemms_fails_a_run_whose_profile_or_ruler_failed():
    """step_gemms exits 1 when a mode's profile, its ruler process or one of the ruler's kernels
    failed (before issue 34: exit 0, and a kernel the ruler could not time was dropped)."""
    fam = lambda n: T.family(n, set())  # noqa: E731
    res = {"mode": "coda", "steps": 20, "sm_mhz": None, "watts": None, "sm_mhz_profiled": None}
    res.update(totals=G.totals(_profile(), 2, fam, 10.0), gemms=[])
    assert G.failures({"modes": [G.with_predictions(res, {"kernels": {}})]}) == []
    timed = G.with_predictions(res, {"kernels": {}, "failed": {"llama3_layer/qkv": "oom"}})
    assert timed["ruler_failed"] == {"llama3_layer/qkv": "oom"}
    doc = {"shape": "1b-2x4096", "kind": "fwdbwd", "modes": [timed]}
    doc["modes"] += [{"mode": "hf", "error": "budget"}, {**res, "ruler_error": ["died"]}]
    assert G.failures(doc) == [
        "hf: budget",
        "coda ruler llama3_layer/qkv: oom",
        "coda ruler: died",
    ]
    assert "- ruler could not time llama3_layer/qkv: oom" in G.render(doc)


# -- step_gemms ----------------------------------------------------------------------------------
def test_coda_kernel_names_map_to_their_chain_step(tmp_path):
    assert G.coda_key(CODA_KERNEL) == ("dgrad_down_dswiglu", "46035cf3c3638be9")
    assert G.coda_key(CUBLAS) is None
    variants = []
    for sym, cls in (
        ("coda_wgrad_down", "GemmMod_coda_wgrad_down_693db6a488f32c2c__none_sm9"),
        (
            "coda_wgrad_down__128x256_c2x1_coop_cs2",
            "GemmMod_coda_wgrad_down_693db6a488f32c2c__none_sm9",
        ),  # noqa: E501
        ("coda_gone", None),  # a variant whose compiled.json is not there is skipped
    ):
        variants.append(SimpleNamespace(symbol=sym))
        if cls:
            (tmp_path / f"{sym}.compiled.json").write_text(json.dumps({"gemm_class": cls}))
    step = SimpleNamespace(name="wgrad_down", variants=variants)
    chain = SimpleNamespace(
        directory=tmp_path, manifest=SimpleNamespace(kernel_steps=lambda: [step])
    )
    assert G.chain_classes(chain) == {"693db6a488f32c2c": "wgrad_down"}


def test_aten_gemm_shapes():
    assert G.aten_mnk("aten::mm", [[8192, 2048], [2048, 128256]]) == (8192, 128256, 2048, 1)
    assert G.aten_mnk("aten::addmm", [[64], [8192, 2048], [2048, 64]]) == (8192, 64, 2048, 1)
    assert G.aten_mnk("aten::bmm", [[4, 128, 64], [4, 64, 256]]) == (128, 256, 64, 4)
    assert G.aten_mnk("aten::linear", [[8192, 2048], [2048, 2048]]) is None
    assert G.aten_mnk("aten::mm", []) is None


def _profile():
    """Two profiled steps: a coda kernel launched outside aten (twice a step), a cuBLAS kernel
    under aten::mm at two shapes, attention, a copy."""
    attached = [
        (CUBLAS, 500.0, "aten::mm", [[8192, 2048], [2048, 8192]]),
        (CUBLAS, 300.0, "aten::mm", [[8192, 2048], [2048, 2048]]),
    ] * 2 + [("Memcpy DtoD (Device -> Device)", 10.0, "aten::copy_", [[1], [1]])] * 2
    device = [(name, us) for name, us, _, _ in attached]
    device += [(CODA_KERNEL, 1000.0), (CODA_KERNEL, 1200.0)] * 2
    device += [("flash_fwd_kernel", 2000.0)] * 2
    return G.merge_records(attached, device)


def test_launch_records_and_gemm_rows():
    records = _profile()
    coda = [r for r in records if r["name"] == CODA_KERNEL]
    assert len(coda) == 4 and all(r["op"] == "" and r["us"] == 1100.0 for r in coda)
    info = {"chain": "llama3_layer", "step": "dgrad_down_dswiglu", "config": "128x256"}
    resolve = lambda n: {**info, "mnk": (8192, 2048, 8192)} if G.coda_key(n) else None  # noqa: E731
    rows = G.gemm_rows(records, 2, lambda n: T.family(n, set()), resolve)
    assert [r["kernel"] for r in rows] == ["llama3_layer/dgrad_down_dswiglu", CUBLAS, CUBLAS]
    top, big, small = rows
    assert top["calls_per_step"] == 2 and top["us_per_call"] == 1100.0
    assert top["ms_per_step"] == 2.2 and top["config"] == "128x256"
    assert top["tflops"] == round(2 * 8192 * 2048 * 8192 / 1100.0 / 1e6, 1)
    assert (big["M"], big["N"], big["K"], big["op"]) == (8192, 8192, 2048, "aten::mm")
    assert small["ms_per_step"] == 0.3 and small["N"] == 2048
    t = G.totals(records, 2, lambda n: T.family(n, set()), step_ms=10.0)
    assert (t["gemm_ms"], t["attention_ms"], t["rest_ms"]) == (3.0, 2.0, 5.0)
    assert t["families_ms"]["copy/cast/fill"] == 0.01


def test_the_prediction():
    rows = [
        {"kernel": "llama3_layer/gate_up", "calls_per_step": 15, "ms_per_step": 30.0},
        {"kernel": "llama3_last/lm_head_lse", "calls_per_step": 1, "ms_per_step": 7.0},
        {"kernel": CUBLAS, "calls_per_step": 1, "ms_per_step": 1.0},
    ]
    ruler = {
        "llama3_layer/gate_up": {"sustained": 1.9, "isolated": 1.8},
        "llama3_last/lm_head_lse": {"sustained": 6.8},
    }
    p = G.predict(rows, ruler, 100.0, "sustained")
    # 15 x 1.9 + 6.8 + 1.0 (measured: no ruler time) + (100 - 38) non-GEMM
    assert p["predicted_gemm_ms"] == 36.3 and p["non_gemm_ms"] == 62.0
    assert (p["predicted_ms"], p["measured_ms"], p["ratio"]) == (98.3, 100.0, 0.983)
    assert p["unpredicted"] == [CUBLAS]
    iso = G.predict(rows, ruler, 100.0, "isolated")
    assert iso["unpredicted"] == ["llama3_last/lm_head_lse", CUBLAS]
    assert iso["predicted_gemm_ms"] == 15 * 1.8 + 7.0 + 1.0
    res = {"totals": {"step_ms": 100.0}, "gemms": rows}
    both = G.with_predictions(res, {"kernels": ruler})
    assert [x["ruler"] for x in both["predictions"]] == ["sustained", "isolated"]


def test_the_report():
    rows = G.gemm_rows(_profile(), 2, lambda n: T.family(n, set()), lambda n: None)
    res = {
        "mode": "coda",
        "steps": 20,
        "sm_mhz": 1485,
        "watts": 689.0,
        "sm_mhz_profiled": 1470,
        "totals": G.totals(_profile(), 2, lambda n: T.family(n, set()), 10.0),
        "gemms": rows,
    }
    ruler = {CUBLAS: {"sustained": 0.45, "replay": 0.31, "replay_mhz": 1605.0}}
    res = G.with_predictions(res, {"kernels": ruler})
    doc = {"shape": "1b-2x4096", "kind": "fwdbwd", "modes": [res, {"mode": "hf", "error": "x"}]}
    text = G.render(doc)
    assert "Step 10.0 ms (median of 20 timed steps, SM 1485 MHz, 689 W)" in text
    assert "SM 1470 MHz" in text and "## hf: failed" in text
    table = [ln for ln in text.splitlines() if ln.startswith("|")]
    assert len(table) == 2 + len(rows) and all(ln.count("|") == 15 for ln in table)
    assert "| replay µs | replay MHz |" in table[0] and "| 310.0 | 1605 |" in text
    assert "**sustained ruler**: predicted" in text and "**replay ruler**: predicted" in text


def test_step_gemms_refuses_bad_arguments():
    with pytest.raises(ValueError, match="at least 1"):
        G.check(G.parser().parse_args(["--out", "x", "--profile-steps", "0"]))
    with pytest.raises(ValueError, match="unknown mode"):
        G.check(G.parser().parse_args(["--out", "x", "--modes", "coda,nope"]))
    assert G.check(G.parser().parse_args(["--out", "x"])) == ["coda", "hf-compile-nomask", "hf"]


def test_the_lm_head_is_sized_at_its_chunk_rows():
    """The step calls llama3_lm_head once per row chunk (2048 rows at V = 128256), so the rulers
    and the shape column read it there, not at the step's 8192 tokens (the first H200 run of
    step_gemms predicted the head at 8192 rows, four times over)."""

    def chain(name):
        static = {"D": 2048, "V": 128256}
        return SimpleNamespace(name=name, manifest=SimpleNamespace(static=static, dynamic="M"))

    assert G._sizes(chain("llama3_lm_head"), 8192)["M"] == 2048
    assert G._sizes(chain("llama3_layer"), 8192)["M"] == 8192


def test_memory_peak_places_what_is_live_at_the_highest_point():
    """benchmarks/memory_peak.py replays an allocator trace: the groups are the blocks live at
    the highest point (not at the end), by the innermost frame in the project's packages."""
    from benchmarks import memory_peak as P

    ours = [{"filename": "/x/torch/a.py", "line": 1, "name": "f"}]
    ours.append({"filename": "/site/coda_spec/runtime/call.py", "line": 46, "name": "alloc"})
    ours.append({"filename": "/site/coda_spec/nn/llama.py", "line": 360, "name": "forward"})
    other = [{"filename": "/x/torch/b.py", "line": 2, "name": "g"}]
    trace = [
        {"action": "alloc", "addr": 1, "size": 100, "frames": ours},
        {"action": "alloc", "addr": 2, "size": 50, "frames": other},
        {"action": "free_completed", "addr": 2},
        {"action": "alloc", "addr": 3, "size": 120, "frames": ours},  # the peak: 220
        {"action": "free_completed", "addr": 1},
        {"action": "alloc", "addr": 4, "size": 60, "frames": other},
    ]
    peak, rows = P.peak_groups(trace)
    assert peak == 220
    assert rows == [("coda_spec/nn/llama.py:360 forward", 220, 2)]


def test_build_times_exits_1_when_a_build_failed(tmp_path, monkeypatch, capsys):
    """benchmarks/build_times.py printed a FAILED row and exited 0 before issue 34."""
    from benchmarks import build_times as B

    def failed_build(cmd, **_):
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="boom\nerror: no compiler")

    monkeypatch.setattr(B.subprocess, "run", failed_build)
    monkeypatch.setattr(sys, "argv", ["build_times.py", "--out", str(tmp_path / "b")])
    assert B.main() == 1
    out, err = capsys.readouterr()
    assert "| FAILED |" in out and "error: no compiler" in out
    assert "build(s) failed: " in err
