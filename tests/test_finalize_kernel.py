"""Finalize steps as one Triton kernel each (``coda_spec.lower.finalize_kernel``), without a GPU.

* Interpreted: every (role, fold, op) a manifest can produce (``colred``/``rowred`` per-tile
  partials folded by sum, max or logsumexp; ``group_out`` and host steps' ``exact`` statistics,
  complete) on random partial buffers -- ragged widths, tile counts that are not the fallback
  variant's, more tiles than one block, an EMPTY fold axis, M = 0 rows, n = 0 for a mean,
  infinities, NaN poison -- plus every finalize step of the bundled specs. The generated kernels
  run under Triton's CPU interpreter in ONE subprocess (``TRITON_INTERPRET=1`` must be set before
  triton is imported, and this session imports triton normally), bound and launched as the
  manifest's ``launch`` entry says (args, grid, outputs), and are compared with the finalize
  semantics in torch (``tests.emulate.fold_partials``: ``EMPTY_FOLD``, ``finalize.mean_of``).
* Compiled: each combination, and each bundled spec's finalize, to an sm_90a cubin through
  ``triton_aot.compile_kernel`` (skipped without triton).
* Text: the generated module's banner, signature and contract, and the refusals.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest

from coda_spec.artifact import eval_shape
from coda_spec.artifact.manifest import finalize_data
from coda_spec.check.frontend import check_source
from coda_spec.check.source import parse_text
from coda_spec.config import BuildConfig, parse_config
from coda_spec.lower.finalize_kernel import FOLD_OPS, finalize_kernel
from coda_spec.lower.module import lower_spec
from tests.conftest import ROOT, SPECS, needs_triton

SPEC_FILE = "specs/synthetic.yaml"
DIMS = {"M": None, "D": 4096}  # a manifest's dims: M dynamic, D static
N_MODES = {"D": "D", "M": "M", "int": 128}  # how n is given: a static dim, a dynamic one, an int
ROLE_FOLDS = {  # every fold a role's partial can carry (rowred/group_out logsumexp: generality)
    "colred": ("sum", "max", "logsumexp"),
    "rowred": ("sum", "max", "logsumexp"),
    "group_out": ("sum", "max"),
    "exact": (None,),
}
# role -> (the field's shape expression, the buffer at the call, M at the call, why)
BUFFERS = {
    "colred": [
        (["M", 16], [37, 16], 37, "ragged-rows"),
        (["M", 16], [300, 43], 300, "other-variant-43-tiles"),
        (["M", 16], [5, 130], 5, "tiles-over-one-block"),
        (["M", 16], [0, 16], 0, "m0-no-rows"),
        (["M", 16], [4, 0], 4, "empty-fold-axis"),
        (["M", 1], [3, 1], 3, "one-tile"),
    ],
    "rowred": [
        (["cdiv(M,128)", 300], [3, 300], 300, "ragged-cols"),
        (["cdiv(M,128)", 300], [37, 300], 4700, "tiles-over-one-block"),
        (["cdiv(M,128)", 300], [0, 300], 0, "m0-empty-fold-axis"),
        (["cdiv(M,128)", 300], [1, 300], 0, "m0-no-launch-buffer"),
        (["cdiv(M,128)", 1], [2, 1], 200, "one-col"),
    ],
    "group_out": [
        (["M", 96], [37, 96], 37, "ragged-groups"),
        (["M", 24], [300, 24], 300, "many-rows"),
        (["M", 96], [0, 96], 0, "m0-no-rows"),
        (["M", 1], [37, 1], 37, "one-group"),
    ],
    "exact": [
        (["M"], [37], 37, "per-row"),
        (["M"], [0], 0, "m0-no-rows"),
        ([1, 300], [1, 300], 5, "per-col-1xN"),
        (["M", 1], [1500, 1], 1500, "per-row-Mx1"),
        (["M", 24], [37, 24], 37, "grouped"),
    ],
}


def _ops(role: str, fold):
    """The one-partial ops (var, which reads two, has its own cases below)."""
    ops = FOLD_OPS[fold] if fold else ("sum", "mean", "rsqrt_mean", "max", "logsumexp")
    return tuple(op for op in ops if op != "var")


def _step(op: str, n, name: str = "finalize_y", line: int = 7) -> dict:
    """A manifest finalize step (as artifact.make_manifest writes it)."""
    return {
        "kind": "finalize",
        "name": name,
        "op": op,
        "of": "y_part",
        "result": "y",
        "n": n if op in ("mean", "rsqrt_mean", "var") else 4096,
        "eps": 1e-6 if op == "rsqrt_mean" else None,
        "line": line,
    }


def _synthetic_cases() -> dict:
    cases = {}
    for role, folds in ROLE_FOLDS.items():
        for fold in folds:
            for op in _ops(role, fold):
                modes = ("D", "M") if op in ("mean", "rsqrt_mean") else ("D",)
                for shape, buf, m, why in BUFFERS[role]:
                    for mode in modes:
                        if mode == "D" and m == 0 and op in ("mean", "rsqrt_mean"):
                            mode = "int"  # M = 0 runs n = M (0) below; a static n here
                        cid = f"{role}-{fold or 'complete'}-{op}-{why}" + (
                            f"-n{mode}" if op in ("mean", "rsqrt_mean") else ""
                        )
                        cases[cid] = {
                            "step": _step(op, N_MODES[mode]),
                            "role": role,
                            "fold": fold,
                            "shape": shape,
                            "dims": DIMS,
                            "sizes": {"M": m, "D": 4096},
                            "buffer": buf,
                            "spec_file": SPEC_FILE,
                        }
    # n given as a static dim without the manifest's dims: an i32 argument bound to D
    case = dict(cases["colred-sum-rsqrt_mean-ragged-rows-nD"], dims=None)
    cases["colred-sum-rsqrt_mean-ragged-rows-nD-no-dims"] = case
    # NaN poison in one partial slot (an unwritten slot under verify's poison) reaches the result
    for role, fold, op, (shape, buf, m, _) in (
        ("colred", "sum", "rsqrt_mean", BUFFERS["colred"][2]),
        ("colred", "max", "max", BUFFERS["colred"][2]),
        ("colred", "logsumexp", "logsumexp", BUFFERS["colred"][2]),
        ("rowred", "sum", "sum", BUFFERS["rowred"][1]),
        ("rowred", "max", "max", BUFFERS["rowred"][1]),
        ("group_out", "sum", "rsqrt_mean", BUFFERS["group_out"][0]),
    ):
        cases[f"{role}-{fold}-{op}-nan-poison"] = {
            "step": _step(op, "D"),
            "role": role,
            "fold": fold,
            "shape": shape,
            "dims": DIMS,
            "sizes": {"M": m, "D": 4096},
            "buffer": buf,
            "spec_file": SPEC_FILE,
            "nan": True,
        }
    # over: every entry to one [] scalar (one program, any rows, M = 0 included); var: two
    # partials (sum, sumsq) folded side by side, with and without over
    for role, fold, op, over in (
        ("colred", "max", "max", "rows"),
        ("colred", "sum", "sum", "rows"),
        ("colred", "sum", "mean", "rows"),
        ("colred", "logsumexp", "logsumexp", "rows"),
        ("rowred", "sum", "rsqrt_mean", "cols"),
        ("rowred", "max", "max", "cols"),
        ("exact", None, "max", "rows"),
        ("colred", "sum", "var", None),
        ("colred", "sum", "var", "rows"),
        ("rowred", "sum", "var", None),
        ("exact", None, "var", None),
    ):
        for shape, buf, m, why in BUFFERS[role][:4]:
            step = _step(op, "M" if op in ("mean", "var") and not over else 4096)
            step["n"] = step["n"] if op in ("mean", "rsqrt_mean", "var") else 4096
            if over:
                step["over"] = over
            if op == "var":
                step["second"] = "y2_part"
            cid = f"{role}-{fold or 'complete'}-{op}-{why}" + (f"-over-{over}" if over else "")
            cases[cid] = {
                "step": step,
                "role": role,
                "fold": fold,
                "shape": shape,
                "dims": DIMS,
                "sizes": {"M": m, "D": 4096},
                "buffer": buf,
                "spec_file": SPEC_FILE,
                "nan": why == "ragged-rows" and op == "max",
            }
    return cases


def _spec_finalizes():
    """(spec stem, spec file, the manifest's finalize step, role, fold, partial shape, dims,
    result shape) of every finalize of the bundled and test specs, with the arguments
    ``coda_spec.build.aot_kernels`` passes: the field from the lowering (the fallback variant),
    or for a host step's partial ``exact`` and the partial's manifest shape."""
    paths = list(SPECS) + sorted((ROOT / "tests" / "specs_extra").glob("*.yaml"))
    out = []
    for path in paths:
        checked = check_source(parse_text(str(path.relative_to(ROOT)), path.read_text()))
        spec, a = checked.spec, checked.analysis
        steps = spec.all_steps()
        finals = [s for s in steps if s.kind == "finalize"]
        if not finals:
            continue
        config = parse_config(spec.configs[0]) if spec.configs else BuildConfig()  # its fallback
        fields = {f.tensor: f for k in lower_spec(checked, config).kernels for f in k.fields}
        dims = {d.name: d.size for d in spec.dims}
        for s in finals:
            step = finalize_data(s, a)
            f = fields.get(s.of)
            if f is not None:
                role, fold, shape = f.role, f.fold, list(f.shape)
            else:  # as coda_spec.build.aot_kernels: the manifest's shape of the host partial
                role, fold, shape = "exact", None, list(a.tensor(s.of).shape)
            result = list(a.tensor(s.result).shape)
            out.append((path.stem, spec.file, step, role, fold, shape, dims, result))
    return out


SPEC_FINALIZES = _spec_finalizes()


def _spec_cases() -> dict:
    cases = {}
    for stem, spec_file, step, role, fold, shape, dims, _ in SPEC_FINALIZES:
        # as the build calls it (no dims: a named n is an i32 argument), and with the dims
        for m, with_dims in ((0, False), (300, False), (300, True)):
            sizes = {k: v for k, v in dims.items() if v is not None} | {"M": m}
            cases[f"{stem}-{step['name']}-M{m}" + ("-dims" if with_dims else "")] = {
                "step": step,
                "role": role,
                "fold": fold,
                "shape": shape,
                "dims": dims if with_dims else None,
                "sizes": sizes,
                "buffer": list(eval_shape(shape, sizes)),
                "spec_file": spec_file,
            }
    return cases


CASES = {**_synthetic_cases(), **_spec_cases()}


def _kernel(case: dict):
    return finalize_kernel(
        case["step"],
        case["role"],
        case["fold"],
        case["shape"],
        spec_file=case["spec_file"],
        dims=case["dims"],
    )


# -- the interpreter subprocess -----------------------------------------------------------------
def _partial(case: dict, torch):
    """A random partial buffer for ``case`` (fixed seed per case id), with the values its fold
    must get right: -inf slots, an all -inf fold line, +inf, huge offsets (a logsumexp that is
    not max-shifted overflows), NaN poison when asked."""
    shape, op, fold = case["buffer"], case["step"]["op"], case["fold"] or case["step"]["op"]
    g = torch.Generator().manual_seed(case["seed"])
    x = torch.randn(shape, generator=g)
    if op == "rsqrt_mean":
        x = x.abs()  # sums of squares (a dot may be negative: rsqrt gives NaN, as in torch)
    if fold in ("max", "logsumexp") and x.numel():
        x = x * 30 + torch.where(torch.rand(shape, generator=g) < 0.5, 1e4, -1e4)
        x[torch.rand(shape, generator=g) < 0.1] = float("-inf")
        flat = x.view(-1)
        flat[len(flat) // 3] = float("inf")
        if case["role"] == "colred" and shape[0] > 2:
            x[1, :] = float("-inf")  # a row whose every tile is -inf
        if case["role"] == "rowred" and shape[1] > 2:
            x[:, 1] = float("-inf")
    if case.get("nan") and x.numel():
        x.view(-1)[x.numel() // 2 + 1] = float("nan")
    return x


def _oracle(case: dict, buf, torch):
    """The finalize semantics in torch (``tests.emulate.fold_partials``) on ``buf``."""
    from tests.emulate import fold_partials

    role, step = case["role"], case["step"]
    n = step["n"]
    n = eval_shape([n], case["sizes"])[0] if isinstance(n, str) else n
    second = buf.abs() + buf * buf if step.get("second") else None  # var: sumsq >= sum^2 / n
    return fold_partials(
        role,
        case["fold"],
        buf,
        step["op"],
        n,
        step["eps"],
        second=second,
        over=bool(step.get("over")),
    )


def _launch(kernel, fn, env: dict, sizes: dict, torch) -> None:
    """Allocate the outputs and launch as the runtime does from the manifest ``launch`` entry."""
    for o in kernel.outputs:  # poisoned: an element the kernel does not write shows as NaN
        env[o["tensor"]] = torch.full(eval_shape(o["shape"], sizes), float("nan"))
    args = []
    for a in kernel.args:
        if "tensor" in a:
            args.append(env[a["tensor"]])
        elif "dim" in a:
            args.append(eval_shape([a["dim"]], sizes)[0])
        else:
            t, axis = a["extent"]
            args.append(env[t].shape[axis])
    grid = tuple(
        g if isinstance(g, int) else -(-env[g["extent"][0]].shape[g["extent"][1]] // g["block"])
        for g in kernel.grid
    )
    if 0 in grid:  # launch.Cubin.launch: an empty grid launches nothing
        assert all(env[o["tensor"]].numel() == 0 for o in kernel.outputs), "grid 0, output not"
        return
    fn[grid](*args, **dict(kernel.constexprs), num_warps=kernel.num_warps)


def _run_case(case: dict, workdir: Path) -> None:
    import torch

    from coda_spec.lower.triton_aot import _import_source

    kernel = _kernel(case)
    path = workdir / f"{case['seed']}_{kernel.step}.py"
    path.write_text(kernel.source)
    fn = _import_source(path, kernel.entry)
    buf = _partial(case, torch)
    env = {case["step"]["of"]: buf}
    if case["step"].get("second"):  # var's sumsq partial, as the oracle makes it
        env[case["step"]["second"]] = buf.abs() + buf * buf
    _launch(kernel, fn, env, case["sizes"], torch)
    got, want = env[case["step"]["result"]], _oracle(case, buf, torch)
    assert got.shape == want.shape, f"shape {tuple(got.shape)} != runtime's {tuple(want.shape)}"
    if case["step"]["op"] == "max":
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(got, want, rtol=2e-6, atol=2e-6, equal_nan=True)


def _interpret_main() -> None:
    """Entry point of the subprocess (TRITON_INTERPRET=1): reads {id: case} on stdin, prints one
    JSON line {id: "ok" or the failure}."""
    import warnings

    warnings.simplefilter("ignore")  # numpy's overflow/divide warnings of exp/log on infinities
    cases = json.loads(sys.stdin.read())
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for cid, case in cases.items():
            try:
                _run_case(case, Path(tmp))
                result[cid] = "ok"
            except Exception as e:  # noqa: BLE001 - reported per case by the parent test
                result[cid] = f"{type(e).__name__}: {e}"
    print(json.dumps(result))


@pytest.fixture(scope="module")
def interpreted():
    cases = {cid: {**c, "seed": zlib.crc32(cid.encode())} for cid, c in CASES.items()}
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    code = "from tests.test_finalize_kernel import _interpret_main; _interpret_main()"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(cases),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@needs_triton
@pytest.mark.parametrize("cid", sorted(CASES))
def test_interpreted_kernel_matches_runtime_finalize(interpreted, cid):
    assert interpreted[cid] == "ok", interpreted[cid]


# -- compile to sm_90a ------------------------------------------------------------------------
COMPILE = {}
for _role, _folds in ROLE_FOLDS.items():
    for _fold in _folds:
        for _op in _ops(_role, _fold):
            for _shape, _buf, _m, _why in BUFFERS[_role][:1]:
                _mode = "M" if _op == "mean" else "D"  # a dynamic n (i32 arg) and a constexpr
                COMPILE[f"{_role}-{_fold or 'complete'}-{_op}"] = CASES[
                    f"{_role}-{_fold or 'complete'}-{_op}-{_why}"
                    + (f"-n{_mode}" if _op in ("mean", "rsqrt_mean") else "")
                ]
COMPILE["exact-complete-sum-1d"] = CASES["exact-complete-sum-per-row"]
COMPILE["exact-complete-sum-2d"] = CASES["exact-complete-sum-grouped"]
COMPILE.update(
    {cid[: -len("-M300")]: c for cid, c in CASES.items() if cid.endswith("-M300")}  # the specs
)


@pytest.mark.slow
@needs_triton
@pytest.mark.parametrize("cid", sorted(COMPILE))
def test_compiles_to_sm90a_cubin(tmp_path, cid):
    from coda_spec.lower.triton_aot import compile_kernel

    kernel = _kernel(COMPILE[cid])
    entry = compile_kernel(kernel, tmp_path)
    cubin = (tmp_path / entry["cubin"]).read_bytes()
    assert cubin[:4] == b"\x7fELF"
    assert entry["name"] == kernel.entry
    assert entry["types"] == [t for _, t in kernel.signature]
    assert len(entry["args"]) == len(entry["types"])
    assert entry["grid"] == list(kernel.grid) and entry["outputs"] == list(kernel.outputs)
    assert (tmp_path / entry["source"]).read_text() == kernel.source


# -- the generated text and the contract ------------------------------------------------------
@pytest.mark.parametrize("cid", sorted(CASES))
def test_source_banner_signature_and_contract(cid):
    case = CASES[cid]
    k = _kernel(case)
    tree = ast.parse(k.source)
    where = f"{case['spec_file']}:{case['step']['line']}"
    # the banner as it always read (coda_spec.versions.BANNERS: part of the content address)
    banner = f'"""Finalize step {case["step"]["name"]} ({where}). Generated by coda; do not edit.'
    assert k.source.splitlines()[0] == banner
    jitted = [f for f in tree.body if isinstance(f, ast.FunctionDef)]
    assert [f.name for f in jitted][-1] == k.entry  # the entry (a NaN-max helper may precede)
    params = [a.arg for a in jitted[-1].args.args]
    assert params == [p for p, _ in k.signature] + [c for c, _ in k.constexprs]
    assert len(k.args) == len(k.signature)
    sizes = case["sizes"]
    for a in k.args:  # every argument binds: a chain tensor, a dim at the call, an extent
        assert (
            a.get("tensor")
            in (case["step"]["of"], case["step"]["result"], case["step"].get("second", "of"))
            or ("dim" in a and eval_shape([a["dim"]], sizes))
            or (a.get("extent", [None])[0] == case["step"]["of"])
        )
    (grid,) = k.grid  # cdiv of an axis of the partial at the launch: nothing static baked in
    if case["step"].get("over"):  # one program, whatever the sizes (no atomics)
        assert grid == 1
    else:
        assert grid["extent"][0] == case["step"]["of"] and grid["block"] > 0
    (out,) = k.outputs
    assert out["tensor"] == case["step"]["result"] and out["dtype"] == "fp32"
    eval_shape(out["shape"], sizes)


def test_rmsnorm_finalize_is_one_launch_with_n_at_the_call():
    """A static n ("D") is a launch argument, not a constant: verify's ragged case re-sizes D
    without recompiling, and a baked-in 4096 would divide by the wrong count there."""
    step = _step("rsqrt_mean", "D", name="finalize_r", line=24)
    step.update(of="ss", result="r")
    k = finalize_kernel(
        step,
        "colred",
        "sum",
        ["M", 16],
        spec_file="specs/rmsnorm_chain.yaml",
        dims={"M": None, "D": 4096},
    )
    assert k.grid == ({"extent": ["ss", 0], "block": 128},)
    assert k.args == (
        {"tensor": "ss"},
        {"tensor": "r"},
        {"extent": ["ss", 0]},
        {"extent": ["ss", 1]},
        {"dim": "D"},
    )
    assert dict(k.constexprs) == {"BLOCK_R": 128, "BLOCK_T": 16, "EPS": 1e-6}
    assert k.outputs == ({"tensor": "r", "dtype": "fp32", "shape": ["M"], "init": "empty"},)
    assert "1.0 / tl.sqrt_rn(mean + EPS)" in k.source


def test_dynamic_n_is_an_i32_dim_argument():
    k = finalize_kernel(
        _step("mean", "M"), "rowred", "sum", ["cdiv(M,128)", 256], spec_file=SPEC_FILE, dims=DIMS
    )
    assert ("n", "i32") in k.signature and {"dim": "M"} in k.args
    assert "N" not in dict(k.constexprs)
    assert k.grid == ({"extent": ["y_part", 1], "block": 64},) and k.outputs[0]["shape"] == [256]
    assert "tl.where(n > 0" in k.source  # a mean over nothing is 0


@pytest.mark.parametrize(
    "role, fold, op, shape, match",
    [
        ("colred", "sum", "max", ["M", 16], "cannot fold sum"),
        ("colred", "max", "mean", ["M", 16], "cannot fold max"),
        ("colred", "mystery", "sum", ["M", 16], "unknown partial fold"),
        ("select", "sum", "sum", ["M", 16], "cannot finalize"),
        ("colred", "sum", "sum", ["M"], "is 2-D"),
        ("exact", None, "sum", [2, 3, 4], "1-D or 2-D"),
        ("colred", "sum", "median", ["M", 16], "unknown op"),
    ],
)
def test_refusals(role, fold, op, shape, match):
    with pytest.raises(ValueError, match=match):
        finalize_kernel(_step(op, "D"), role, fold, shape, spec_file=SPEC_FILE, dims=DIMS)


def test_rsqrt_mean_needs_eps_and_mean_needs_n():
    step = _step("rsqrt_mean", "D") | {"eps": None}
    with pytest.raises(ValueError, match="needs eps"):
        finalize_kernel(step, "colred", "sum", ["M", 16], spec_file=SPEC_FILE)
    step = _step("mean", None)
    with pytest.raises(ValueError, match="needs n"):
        finalize_kernel(step, "colred", "sum", ["M", 16], spec_file=SPEC_FILE)


def test_every_bundled_finalize_is_covered():
    """The catalogue's finalizes (the fields from the lowering): which combinations exist."""
    combos = {(role, fold, step["op"]) for _, _, step, role, fold, _, _, _ in SPEC_FINALIZES}
    assert {
        ("colred", "sum", "rsqrt_mean"),
        ("colred", "sum", "mean"),
        ("colred", "logsumexp", "logsumexp"),
        ("rowred", "sum", "sum"),
        ("group_out", "sum", "rsqrt_mean"),
    } <= combos
    for role, fold, op in combos:
        assert (op in _ops(role, fold) or op == "var") and fold in ROLE_FOLDS[role]


@pytest.mark.parametrize(
    "stem, step, role, fold, shape, result",
    [(s[0], s[2], s[3], s[4], s[5], s[7]) for s in SPEC_FINALIZES],
    ids=[f"{s[0]}-{s[2]['name']}" for s in SPEC_FINALIZES],
)
def test_result_shape_is_the_manifest_tensor_shape(stem, step, role, fold, shape, result):
    """The runtime allocates a launch's outputs at the manifest's tensor shape: the kernel's
    ``outputs`` shape must be that (the eager finalize's result shape)."""
    k = finalize_kernel(step, role, fold, shape, spec_file=f"specs/{stem}.yaml")
    assert k.outputs[0]["shape"] == result
