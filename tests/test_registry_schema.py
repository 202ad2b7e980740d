"""The JSON Schema and the primitive registry agree, and the checked-in schema file is current."""

from __future__ import annotations

import json

import pytest
import yaml
from jsonschema import Draft202012Validator

from coda_spec.primitives import registry
from coda_spec.primitives.base import FAMILIES
from coda_spec.schema import SCHEMA_FILE, build_schema, schema_json

PRIMS = sorted(registry())


def test_schema_file_is_current():
    assert SCHEMA_FILE.read_text() == schema_json(), (
        "coda_spec/schema/coda-1.schema.json is stale; run: coda schema > "
        "coda_spec/schema/coda-1.schema.json"
    )


def test_schema_is_valid_draft_2020_12():
    Draft202012Validator.check_schema(build_schema())


def test_schema_defs_match_registry():
    defs = build_schema()["$defs"]
    in_schema = sorted(k[len("prim_") :] for k in defs if k.startswith("prim_"))
    assert in_schema == PRIMS
    refs = sorted(r["$ref"].rsplit("_", 1)[-1] for r in defs["epilogue_item"]["anyOf"])
    assert len(refs) == len(PRIMS)


def test_every_family_has_primitives():
    fams = {p.family for p in registry().values()}
    assert fams == set(FAMILIES)


def _closed(schema, where="") -> list[str]:
    """Paths of object schemas that do not set additionalProperties: false."""
    bad = []
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "properties" in schema:
            if schema.get("additionalProperties") is not False:
                bad.append(where)
        for k, v in schema.items():
            bad += _closed(v, f"{where}/{k}")
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            bad += _closed(v, f"{where}/{i}")
    return bad


def test_additional_properties_false_everywhere():
    assert _closed(build_schema()) == []


@pytest.mark.parametrize("name", PRIMS)
def test_primitive_declares_itself(name):
    p = registry()[name]
    assert p.name == name
    assert p.family in FAMILIES
    assert p.summary and p.example.startswith("- {")
    assert name in p.schema["properties"] and name in p.schema["required"]
    for key in p.operands + p.tensors:
        assert key in p.schema["properties"], f"port {key} missing from {name}'s schema"
    assert p.cache_key() == (name, p.version)


@pytest.mark.parametrize("name", PRIMS)
def test_primitive_example_matches_its_fragment_and_the_full_schema(name):
    p = registry()[name]
    item = yaml.safe_load(p.example)[0]
    Draft202012Validator(p.schema).validate(item)
    full = build_schema()
    item_schema = {"$defs": full["$defs"], "$ref": "#/$defs/epilogue_item"}
    Draft202012Validator(item_schema).validate(item)


def test_full_schema_accepts_every_bundled_spec():
    from coda_spec.check.source import load_source
    from tests.conftest import SPECS

    validator = Draft202012Validator(build_schema())
    for path in SPECS:
        data = load_source(path).data
        errors = [e.message for e in validator.iter_errors(data)]
        assert errors == [], f"{path.name}: {errors[:3]}"


def test_cli_schema_prints_the_schema():
    from click.testing import CliRunner

    from coda_spec.cli import main

    out = CliRunner().invoke(main, ["schema"])
    assert out.exit_code == 0
    assert json.loads(out.output)["$id"] == "urn:coda:spec:1"


# -- one file per primitive: discovery, derived item fields, the cache key -----------------------


def test_registry_is_every_primitive_file_discovered():
    """Each non-underscore module of the package (except base and the two lowering contracts)
    is a primitive named after it."""
    import importlib
    from pathlib import Path

    import coda_spec.primitives as package
    from coda_spec.primitives import NOT_PRIMITIVES, primitive_modules

    assert NOT_PRIMITIVES == ("base", "lower_api", "host_api")
    files = sorted(
        p.stem
        for p in Path(package.__file__).parent.glob("*.py")
        if not p.stem.startswith("_") and p.stem not in NOT_PRIMITIVES
    )
    assert list(primitive_modules()) == files
    assert list(registry()) == files  # deterministic: sorted by name
    for stem in files:
        module = importlib.import_module(f"coda_spec.primitives.{stem}")
        assert module.PRIMITIVE.name == stem, f"{stem}.py declares '{module.PRIMITIVE.name}'"


def test_registry_refuses_a_primitive_named_unlike_its_file(monkeypatch):
    from dataclasses import replace

    from coda_spec.primitives import relu

    monkeypatch.setattr(relu, "PRIMITIVE", replace(relu.PRIMITIVE, name="rectify"))
    with pytest.raises(ImportError, match=r"relu\.py declares primitive 'rectify'"):
        registry()


def test_item_fields_are_derived_from_the_primitives():
    from coda_spec.check.validate import item_fields

    prims = registry()
    fields = item_fields(prims)
    for name, p in prims.items():
        assert set(p.schema["properties"]) - {name} <= fields, name
    # a primitive's name is a field only as clamp's bounds, and such an item is one clamp
    assert fields & set(prims) == {"min", "max"}
    from coda_spec.primitives import item_primitives

    assert item_primitives({"min": 0.0, "clamp": "x", "max": 1.0, "as": "y"}, prims) == ["clamp"]
    assert item_primitives({"min": ["a", 1.0], "max": ["b", 2.0]}, prims) == ["min", "max"]
    assert {"as", "doc", "of", "by", "cap"} <= fields


def test_unknown_primitive_still_gets_did_you_mean():
    from coda_spec.check.frontend import check_source
    from coda_spec.check.source import parse_text
    from coda_spec.errors import SpecError

    text = (
        "coda: 1\nname: t\ntensors:\n  x: {shape: [64, 64], dtype: bf16}\n"
        "steps:\n  - kernel: k\n    gemm: {a: x, b: x.T}\n    epilogue:\n"
        "      - {relux: acc, cap: 2.0, as: y}\n      - {store: y}\noutputs: {y: bf16}\n"
    )
    with pytest.raises(SpecError) as e:
        check_source(parse_text("t.yaml", text))
    [d] = e.value.diagnostics
    assert (d.line, d.col, d.message) == (9, 10, "unknown primitive 'relux'")
    assert "relu" in d.hint


def _hash(path):
    from types import SimpleNamespace

    from coda_spec.build import build_hash
    from coda_spec.check.frontend import check_file
    from coda_spec.config import BuildConfig

    return build_hash(check_file(path), BuildConfig(), SimpleNamespace(source="kernel"), ())


def test_build_hash_includes_the_versions_of_used_primitives(monkeypatch):
    from dataclasses import replace

    from coda_spec.check.frontend import check_file
    from coda_spec.primitives import cache_keys, relu, softcap
    from tests.conftest import ROOT

    spec = ROOT / "tests" / "specs_extra" / "softcap_logits.yaml"
    assert cache_keys(check_file(spec).spec) == [["softcap", 1], ["store", 1]]
    before = _hash(spec)
    monkeypatch.setattr(relu, "PRIMITIVE", replace(relu.PRIMITIVE, version=2))  # unused
    assert _hash(spec) == before
    monkeypatch.setattr(softcap, "PRIMITIVE", replace(softcap.PRIMITIVE, version=2))  # used
    assert cache_keys(check_file(spec).spec) == [["softcap", 2], ["store", 1]]
    assert _hash(spec) != before


def test_a_row_vector_beside_a_tile_of_dynamic_width_is_an_item_error():
    """A tile whose width is a dynamic dim (a host step over a tensor declared [D, M]) beside a
    row vector: the error says what is wrong, with no per-head hint it cannot compute (it was a
    TypeError from ``'M' % 1152``, found by tests/test_fuzz.py on gemma3_ffn)."""
    from coda_spec.errors import ItemError
    from coda_spec.primitives.base import VType, broadcast

    with pytest.raises(ItemError, match="one value per column: it has 1152 values"):
        broadcast([VType("tile", "M"), VType("row", 1152)], "'mul'")
