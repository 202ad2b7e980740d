"""Pair lanes in generated code: dSwiGLU / dGeGLU through quack.activation, and reductions of
pairs over named fp32 lanes.

A pair is unpacked once (``z_g, z_u = unpack(z)``) and a pair built by ``pack(a, b)`` keeps its
lane names, so a later row dot reads the lanes directly (``z_g * dz_g + z_u * dz_u``, QuACK's own
``dswiglu_dpreact_mod``); a pair whose lanes are not named yet is unpacked where it is first read.
In ``acc_pair`` mode QuACK's sinks take both lanes, so there a reduction returns a Pair. The text
tests lower only (no quack import); the build test compiles both modes for sm_90a.
"""

from __future__ import annotations

import json
import re

import pytest

from coda_spec.check.frontend import check_source
from coda_spec.check.source import parse_text
from coda_spec.config import BuildConfig
from coda_spec.errors import SpecError
from coda_spec.lower.module import lower_spec
from tests.conftest import needs_build

PACKED = """\
coda: 1
name: packed_lanes
dims: {M: dynamic, D: 256, F: 512}
tensors:
  dout:   {shape: [M, D], dtype: bf16}
  w_down: {shape: [D, F], dtype: bf16}
  z:      {shape: [M, 2*F], dtype: bf16}
steps:
  - kernel: k
    gemm: {a: dout, b: w_down}
    epilogue:
      - {load_tile: z}
      - {ACT: acc, z: z, as: [dz, h]}
      - {mul: [h, 2.0], as: h2}
      - {store: dz}
      - {store: h2}
      - {reduce_row: dot, of: [z, dz], as: zdz_part}
      - {reduce_row: sum, of: dz, as: sdz_part}
      - {reduce_row: sumsq, of: z, as: zz_part}
  - {finalize: sum, of: zdz_part, as: zdz}
  - {finalize: sum, of: sdz_part, as: sdz}
  - {finalize: sum, of: zz_part, as: zz}
outputs: {dz: bf16, h2: bf16, zdz: fp32, sdz: fp32, zz: fp32}
"""

ACC_PAIR = """\
coda: 1
name: acc_pair_lanes
dims: {M: dynamic, D: 256, F: 512}
tensors:
  x:    {shape: [M, D], dtype: bf16}
  w_gu: {shape: ["2*F", D], dtype: bf16}
steps:
  - kernel: k
    gemm: {a: x, b: w_gu.T}
    epilogue:
      - {mul: [acc, acc], as: sq}
      - {reduce_row: dot, of: [acc, sq], as: cube_part}
      - {reduce_row: sumsq, of: sq, as: ss_part}
      - {reduce_row: sum, of: acc, as: s_part}
      - {swiglu: acc, as: out}
      - {store: out}
  - {finalize: sum, of: cube_part, as: cube}
  - {finalize: sum, of: ss_part, as: ss}
  - {finalize: sum, of: s_part, as: s}
outputs: {out: bf16, cube: fp32, ss: fp32, s: fp32}
"""

PLAIN_DOT = """\
coda: 1
name: plain_dot
dims: {M: dynamic, D: 256, N: 512}
tensors:
  x: {shape: [M, D], dtype: bf16}
  w: {shape: [N, D], dtype: bf16}
  u: {shape: [M, N], dtype: bf16}
steps:
  - kernel: k
    gemm: {a: x, b: w.T}
    epilogue:
      - {load_tile: u}
      - {reduce_row: dot, of: [acc, u], as: p}
      - {store: acc, to: y}
  - {finalize: sum, of: p, as: s}
outputs: {y: bf16, s: fp32}
"""


def _body(text: str, name: str = "x.yaml") -> str:
    checked = check_source(parse_text(name, text))
    source = lower_spec(checked, BuildConfig()).source
    return source[source.index("def coda_k") :]


@pytest.mark.parametrize("act", ["dswiglu", "dgeglu"])
def test_dgated_calls_quack_activation_and_the_dot_reads_named_lanes(act):
    body = _body(PACKED.replace("ACT", act))
    lines = [ln.strip() for ln in body.splitlines() if not ln.strip().startswith("#")]
    assert lines[1:5] == [
        "z = c",
        "z_g, z_u = unpack(z)",
        f"dz_g, dz_u, h = {act}(z_g, z_u, acc)",
        "dz = pack(dz_g, dz_u)",
    ]
    ret = lines[-1]
    assert '"zdz_part": z_g * dz_g + z_u * dz_u' in ret
    assert '"sdz_part": dz_g + dz_u' in ret
    assert '"zz_part": z_g * z_g + z_u * z_u' in ret
    assert body.count("unpack(") == 1  # z once; dz's lanes are named by its pack
    assert "_lift" not in body and "_and_grad" not in body


def test_a_pair_without_named_lanes_is_unpacked_where_first_read():
    # the reduction reads z before dswiglu does: it unpacks z (a/b lanes), dswiglu reuses them
    text = PACKED.replace("ACT", "dswiglu").replace(
        "      - {load_tile: z}\n",
        "      - {load_tile: z}\n      - {reduce_row: sumsq, of: z, as: zz_part}\n",
    )
    text = text.replace("      - {reduce_row: sumsq, of: z, as: zz_part}\n  - {fin", "  - {fin")
    body = _body(text)
    assert re.search(r"sumsq, of: z, as: zz_part\}\n    z_a, z_b = unpack\(z\)\n", body), body
    assert "dz_g, dz_u, h = dswiglu(z_a, z_b, acc)" in body
    assert '"zdz_part": z_a * dz_g + z_b * dz_u' in body
    assert body.count("unpack(") == 1


def test_lane_names_never_shadow_a_spec_value():
    body = _body(PACKED.replace("ACT", "dswiglu").replace("h2", "z_g"))
    assert "z_g_1, z_u = unpack(z)" in body
    assert "z_g = h * 2.0" in body
    assert '"zdz_part": z_g_1 * dz_g + z_u * dz_u' in body


def test_acc_pair_reductions_return_both_lanes():
    body = _body(ACC_PAIR)
    ret = body.strip().splitlines()[-1]
    assert '"cube_part": acc * sq' in ret
    assert '"ss_part": sq * sq' in ret
    assert '"s_part": acc,' in ret
    assert "acc_g, acc_u = unpack(acc)" in body  # swiglu's own unpack


def test_dot_of_plain_values_is_unchanged():
    checked = check_source(parse_text("x.yaml", PLAIN_DOT))
    lowered = lower_spec(checked, BuildConfig())
    assert '"p": ColVecReduce("p", scaled=True)' in lowered.source
    assert '"p": (acc, u)' in lowered.source
    assert "unpack(" not in lowered.source


def test_per_column_reduction_of_packed_pairs_is_refused():
    text = PACKED.replace("ACT", "dswiglu").replace(
        "{reduce_row: sum, of: dz, as: sdz_part}", "{reduce_col: sum, of: dz, as: sdz_part}"
    )
    with pytest.raises(SpecError) as e:
        lower_spec(check_source(parse_text("x.yaml", text)), BuildConfig())
    assert "per-column reduction of packed pairs" in e.value.diagnostics[0].message


@pytest.mark.slow
@needs_build
def test_both_pair_modes_compile_for_sm90a_without_spills(tmp_path):
    from coda_spec.build import BuildOptions, build_spec
    from coda_spec.lower.sass import nvdisasm_path

    for name, text in (("packed.yaml", PACKED.replace("ACT", "dgeglu")), ("pair.yaml", ACC_PAIR)):
        path = tmp_path / name
        path.write_text(text)
        res = build_spec(path, BuildOptions(out=tmp_path / "build"))
        manifest = json.loads((res.directory / "manifest.json").read_text())
        (k,) = [s for s in manifest["steps"] if s["kind"] == "kernel"]
        assert (res.directory / f"{k['symbol']}.o").stat().st_size > 10_000
        spills = [v["spills"] for v in k["variants"]]
        assert spills == [0 if nvdisasm_path() else None], spills
