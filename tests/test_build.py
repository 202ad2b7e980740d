"""``coda build`` on the bundled catalogue, GPU-blind (CI): every spec compiles for sm_90a.

A module fixture builds this file's part of the catalogue (``CATALOGUE``) once, one compile
worker per spec (~750 MB; one worker importing cutlass and quack, not two: the other xdist
worker keeps the second core busy). The five largest specs (``LARGE``, three fifths of the
catalogue's sm_90a kernels) are built by tests/test_build_large.py, which imports these tests:
with ``--dist loadfile`` one file runs whole on one worker, and the catalogue in one file was the
suite's long pole (537 s of a 13-minute CI run). Then, per spec: the manifest's epilogue
arguments are exactly the spec's operands, outputs and reductions; each kernel's cubin (cut out
of its object) is sm_90a with HGMMA, TMA loads, a TMA store or reduce per tile output, and no
local memory. Cache hits and
atomicity are tested on small specs; the host logic (refusals, compile-failure mapping,
--stop-after) is in tests/test_build_host.py and tests/test_stages.py, which run without quack.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from coda_spec import artifact
from coda_spec.artifact.builddir import prune
from coda_spec.build import BuildOptions, build_spec
from coda_spec.check.frontend import check_file
from coda_spec.config import BuildConfig
from coda_spec.errors import SpecError
from coda_spec.lower.module import accumulating, kernel_steps, lower_spec
from tests.conftest import ROOT, SPECS, needs_build
from tests.cubin import arch_of, cubins, nvdisasm_path, opcodes

# the compile tier: sm_90a through cutlass/quack, run from the repo root
pytestmark = [pytest.mark.slow, needs_build, pytest.mark.usefixtures("at_root")]
# the five with the most kernels: tests/test_build_large.py builds them
LARGE = (
    "llama3_last_mlp_recompute",
    "llama3_last_recompute",
    "llama3_layer",
    "llama3_layer_recompute",
    "llama_block",
)
# family chains whose every epilogue is a form the llama3 chains above already compile here
# (their eps, or no RoPE, change constants only); each is built for the H200 and verified there
# (docs/benchmarks.md, "Model families on the H200"). The new forms stay: qwen2_first (a bias
# before RoPE), gemma3_ffn (a prologue with 1 + g, a two-pass post-norm)
REPEATS = (
    "olmo2_attn_out",
    "olmo2_mlp",
    "olmo2_qkv",
    "qwen2_last_mlp",
    "qwen2_layer",
    "qwen3_first",
    "qwen3_last_mlp",
    "qwen3_layer",
)
CATALOGUE = [p for p in SPECS if p.stem not in LARGE + REPEATS]


def _has_gemm(path) -> bool:
    spec = check_file(path).spec
    return any(s.kind == "kernel" for s in spec.steps) or spec.backward is not None


def _has_backward(path) -> bool:
    return check_file(path).spec.backward is not None


def pytest_generate_tests(metafunc):
    """``path``, ``gemm_path`` and ``backward_path`` range over the test module's
    ``CATALOGUE``: every spec, those with a GEMM kernel, those with a backward section."""
    for name, keep in (("path", None), ("gemm_path", _has_gemm), ("backward_path", _has_backward)):
        if name in metafunc.fixturenames:
            paths = [p for p in metafunc.module.CATALOGUE if keep is None or keep(p)]
            metafunc.parametrize(name, paths, ids=[p.stem for p in paths])


@pytest.fixture(scope="module")
def built(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    results = {}
    for path in request.module.CATALOGUE:
        try:
            # explicit: the untuned pick alone; a spec's own configs: (the llama3 specs list
            # eight) would multiply its compile time here, and they are built for the H200 runs.
            # A spec that lists one config (gemma3_ffn: its epilogue's registers) is built at it.
            configs = check_file(path).spec.configs
            opts = BuildOptions(out=out, explicit=len(configs) != 1, jobs=1)
            results[path.stem] = build_spec(path.relative_to(ROOT), opts)
        except SpecError as e:
            results[path.stem] = e
    return out, results


def _result(built, stem):
    res = built[1][stem]
    if isinstance(res, SpecError):
        pytest.fail("; ".join(d.message for d in res.diagnostics))
    return res


def test_spec_builds(built, path):
    res = _result(built, path.stem)
    manifest = json.loads((res.directory / "manifest.json").read_text())
    assert manifest["format"] == artifact.FORMAT_VERSION
    assert manifest["digest"] == check_file(path.relative_to(ROOT)).spec.digest
    kernels = [s for s in manifest["steps"] + manifest["backward_steps"] if s["kind"] == "kernel"]
    for k in kernels:
        assert (res.directory / f"{k['symbol']}.o").stat().st_size > 10_000
    if kernels:
        assert (res.directory / manifest["library"]).is_file()
    for f in ("lowered.json", "spec.yaml", "spec.normalized.json", "build.log"):
        assert (res.directory / f).is_file()
    assert (res.directory / "kernel.py").is_file() == bool(kernels)  # host-only: no kernel.py


def _epilogue_names(step) -> set:
    """Chain tensors an epilogue reads (loads, and index tensors: gather_col's, onehot's,
    valid's) or writes (stores, reductions)."""
    names = set()
    for op in step.epilogue:
        if op.prim.startswith("load_") or op.prim in ("onehot", "valid"):
            names.add(op.get(op.prim))
        elif op.prim == "gather_col":
            names.add(op.get("index"))
        elif op.prim == "store":
            names.add(op.get("to"))
        elif op.prim.startswith("reduce_") or op.prim == "prepass":
            names.update(op.results)
    return names


def test_manifest_epilogue_arguments_are_the_specs(built, path):
    res = _result(built, path.stem)
    manifest = json.loads((res.directory / "manifest.json").read_text())
    kernels = {
        s["name"]: s
        for s in manifest["steps"] + manifest["backward_steps"]
        if s["kind"] == "kernel"
    }
    checked = check_file(path.relative_to(ROOT))
    for step, _ in kernel_steps(checked.analysis):
        k = kernels[step.name]
        order = [f for f in k["field_order"] if not f.startswith("split_k_")]
        assert sorted(order) == sorted(f["name"] for f in k["fields"])
        bound = {f["tensor"] for f in k["fields"] if f["tensor"]}  # "": the column table
        bound |= {x[0] for x in (k["d"], k["c"]) if x}
        assert bound == _epilogue_names(step), step.name
        for f in k["fields"]:
            assert f["dtype"] in ("bf16", "fp16", "fp32", "int32", "int64")


def test_cubins_are_sm90a_with_tma_and_no_local_memory(built, gemm_path, tmp_path):
    path = gemm_path
    if nvdisasm_path() is None:  # asked here, not at import: finding it imports triton
        pytest.skip("triton's nvdisasm not found")
    res = _result(built, path.stem)
    manifest = json.loads((res.directory / "manifest.json").read_text())
    for k in [s for s in manifest["steps"] + manifest["backward_steps"] if s["kind"] == "kernel"]:
        images = cubins(res.directory / f"{k['symbol']}.o")
        assert images, f"no cubin inside {k['symbol']}.o"
        for cb in images:
            assert arch_of(cb, tmp_path) == "sm_90a", k["symbol"]
            ops = opcodes(cb, tmp_path)
            assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0, k["symbol"]
            tile_outputs = (k["d"] is not None) + sum(f["role"] == "aux" for f in k["fields"])
            stores = ops["UTMASTG"] + ops["UTMAREDG"]
            if tile_outputs:
                assert stores >= tile_outputs, (k["symbol"], dict(ops))
            if k["add_to"]:
                assert ops["UTMAREDG"] > 0, k["symbol"]
            assert ops["STL"] == 0 and ops["LDL"] == 0, f"{k['symbol']} uses local memory"


def test_rebuild_is_a_cache_hit_without_torch_or_quack(built):
    out = built[0]
    code = (
        "import sys, time; from pathlib import Path;"
        "from coda_spec.build import BuildOptions, build_spec;"
        "r = build_spec(Path('specs/f2_deferred_norm.yaml'),"
        f" BuildOptions(out=Path({str(out)!r})));"
        "assert r.cached, r;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'quack', 'cutlass')];"
        "assert not bad, bad; print('ok', r.seconds)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "cache hit" in res.stdout


def test_killed_build_leaves_nothing_that_looks_complete(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "coda_spec.cli",
        "build",
        "specs/f2_deferred_norm.yaml",
        "-o",
        str(tmp_path),
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not any(
        p.name.startswith(".tmp-") for p in tmp_path.iterdir()
    ):
        time.sleep(0.1)
    time.sleep(1.0)
    proc.kill()
    proc.wait()
    for sub in tmp_path.iterdir():
        assert sub.name.startswith(".tmp-") or not sub.is_dir(), sub
        assert not (sub / "manifest.json").exists()
    removed = prune(tmp_path, [])
    assert all(p.name.startswith(".tmp-") for p in removed)
    assert not any(tmp_path.iterdir())


def test_two_concurrent_builds_of_one_spec_are_safe(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "coda_spec.cli",
        "build",
        "specs/f8_scale.yaml",
        "-o",
        str(tmp_path),
        "-j",
        "1",
    ]
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate()[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    dirs = [d for d in tmp_path.iterdir() if d.is_dir() and not d.is_symlink()]
    assert len(dirs) == 1 and (dirs[0] / "manifest.json").is_file()
    assert (tmp_path / "f8_scale-latest" / "manifest.json").is_file()


def test_accumulating_kernels_reduce_add_their_d(built, backward_path, tmp_path):
    """Each weight gradient's accumulating kernel (``accumulate`` in the manifest, exactly the
    steps of the build's rule) is its plain kernel with D's TMA store turned into a TMA
    reduce-add (UTMAREDG): D += result, QuACK's add_to_output."""
    path = backward_path
    if nvdisasm_path() is None:
        pytest.skip("triton's nvdisasm not found")
    res = _result(built, path.stem)
    manifest = json.loads((res.directory / "manifest.json").read_text())
    checked = check_file(path.relative_to(ROOT))
    want = accumulating(checked, lower_spec(checked, BuildConfig()).kernels)
    kernels = [s for s in manifest["backward_steps"] if s["kind"] == "kernel"]
    got = {k["name"]: k["d"][0] for k in kernels if k["accumulate"] is not None}
    assert got == want and got
    for k in kernels:
        if k["accumulate"] is None:
            continue
        plain, acc = (
            opcodes(cb, tmp_path)
            for symbol in (k["symbol"], k["accumulate"]["symbol"])
            for cb in cubins(res.directory / f"{symbol}.o")
        )
        assert acc["HGMMA"] > 0 and acc["UTMAREDG"] > plain["UTMAREDG"], (k["name"], dict(acc))
        assert acc["UTMASTG"] < plain["UTMASTG"], (k["name"], dict(acc))
