"""The tune table shipped in the package covers the builds a user gets (issue 21).

A bundled spec with ``configs:`` (the llama3 model chains) builds, with no flag, into a build
whose content hash is computed here without a GPU (``--stop-after lower``: the same hash the
full build gets). ``coda_spec/tuned/h200.json`` must hold an entry for that hash, and for every
kernel of it with more than one variant, at each benchmarked shape. A change to a spec, to the
lowering, to a primitive or to a pinned tool version moves the hash: this test then fails until
the table is re-tuned on the H200 (docs/tuning.md, "The shipped table").
"""

from __future__ import annotations

import json

import pytest

from coda_spec.artifact.tune_table import BUNDLED_DIR, load_table
from coda_spec.build import BuildOptions, build_spec
from coda_spec.check.frontend import check_file
from coda_spec.nn.llama import lm_head_chunk
from tests.conftest import ROOT

TABLE = BUNDLED_DIR / "h200.json"


# the bundled specs with candidates to pick among (a spec may list one config alone, a fixed
# tile with nothing to tune: gemma3_ffn's, chosen for its epilogue's registers)
MODEL_SPECS = sorted(
    p for p in (ROOT / "specs").glob("*.yaml") if len(check_file(p).spec.configs) > 1
)
# the shapes benchmarks/train_step.py times: the 1B config and the 8B-like layers, 8192 tokens
SHAPES = ({"D": 2048, "F": 8192, "HD": 64}, {"D": 4096, "F": 14336, "HD": 128})
TOKENS = 8192


def rows_per_call(spec: str) -> int:
    """The M a spec's chain runs at in a step of TOKENS tokens: the model calls the LM head once
    per row chunk (coda_spec.nn.llama.lm_head_chunk), every other chain over all the tokens."""
    return lm_head_chunk(TOKENS, 128256) if spec == "llama3_lm_head" else TOKENS


def test_the_model_specs_carry_their_candidates():
    names = {p.stem for p in MODEL_SPECS}
    assert {"llama3_first", "llama3_layer", "llama3_last"} <= names


@pytest.mark.parametrize("spec", MODEL_SPECS, ids=lambda p: p.stem)
def test_every_bundled_build_has_picks_in_the_shipped_table(spec, tmp_path):
    res = build_spec(spec, BuildOptions(out=tmp_path, stop_after="lower"))
    key = res.directory.name
    table = load_table(TABLE)
    entries = table.builds(key)
    assert entries, (
        f"{TABLE.relative_to(ROOT)} has no entry for build {key} (the build a user gets from "
        f"`coda build {spec.relative_to(ROOT)}`); re-tune it on the H200: "
        "BUILDS=... bash benchmarks/tune_cap_device.sh, then merge its h200.json (docs/tuning.md)"
    )
    lowered = json.loads((res.directory / "lowered.json").read_text())
    tuned = [k for k, v in lowered["variants"].items() if len(v) > 1]
    assert tuned, f"{key}: no kernel with more than one variant"
    kernels = entries[0][1]["kernels"]
    m = rows_per_call(spec.stem)
    for step in tuned:
        rows = kernels.get(step, [])
        for shape in SHAPES:
            hit = [
                r
                for r in rows
                if all(r["dims"].get(d) == n for d, n in shape.items()) and r["m_max"] >= m
            ]
            assert hit, f"{key}: kernel {step} has no pick at {shape}, M = {m}"


def test_the_build_address_does_not_depend_on_how_the_path_is_spelled(tmp_path, monkeypatch):
    """specs/x.yaml, /abs/.../specs/x.yaml and x.yaml from inside specs/ build to one address
    (the generated code names the file as given; the hash reads it under its name alone)."""
    spec = ROOT / "specs" / "llama3_first.yaml"
    names = {build_spec(spec, BuildOptions(out=tmp_path / "a", stop_after="lower")).directory.name}
    monkeypatch.chdir(ROOT)
    rel = BuildOptions(out=tmp_path / "b", stop_after="lower")
    names.add(build_spec(spec.relative_to(ROOT), rel).directory.name)
    monkeypatch.chdir(ROOT / "specs")
    here = BuildOptions(out=tmp_path / "c", stop_after="lower")
    names.add(build_spec("llama3_first.yaml", here).directory.name)
    assert len(names) == 1, names
