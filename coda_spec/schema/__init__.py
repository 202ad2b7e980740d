"""The JSON Schema of spec language v1 (``coda: 1``).

``build_schema()`` composes the top-level structure below with each primitive's fragment from the
registry (``$defs/prim_<name>``). The result is also checked in as ``coda-1.schema.json`` beside
this file so editors (YAML language server: ``# yaml-language-server: $schema=...``) and LLM tools
can use it without running coda; ``coda schema`` prints it and a test keeps file and registry in
sync. ``additionalProperties: false`` holds at every level.

The validator (``coda_spec.check.validate``) checks with the very same fragments but dispatches each
step and epilogue item to its own fragment first, which turns ``anyOf`` soup into one precise
message per problem.
"""

from __future__ import annotations

import json
from pathlib import Path

from coda_spec.finalize import OPS as FINALIZE_OPS
from coda_spec.finalize import OVER as FINALIZE_OVER
from coda_spec.finalize import SECONDS as FINALIZE_SECONDS
from coda_spec.primitives import registry
from coda_spec.primitives.base import (
    DIM_REF,
    DTYPES,
    FP8_DTYPES,
    INDEX_DTYPES,
    MASK_DTYPES,
    NAME_RE,
)

SCHEMA_FILE = Path(__file__).with_name("coda-1.schema.json")
SCHEMA_ID = "urn:coda:spec:1"
OPERAND_RE = r"^[A-Za-z_][A-Za-z0-9_]*(\.T)?$"
STEP_KINDS = ("kernel", "host", "finalize")

_NAME = {"type": "string", "pattern": NAME_RE}
_DOC = {"type": "string"}


def _obj(properties: dict, required=(), **extra) -> dict:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
        **extra,
    }


def _named_map(value: dict, **extra) -> dict:
    return {
        "type": "object",
        "propertyNames": {"pattern": NAME_RE},
        "additionalProperties": value,
        **extra,
    }


def structure_defs() -> dict:
    """Every ``$defs`` entry except the primitives (validate.py reuses these one by one)."""
    bound = {"anyOf": [{"type": "number"}, {"type": "string"}]}
    return {
        "dim": {"anyOf": [{"type": "integer", "minimum": 1}, {"const": "dynamic"}]},
        "tensor": _obj(
            {
                "shape": {"type": "array", "items": DIM_REF, "maxItems": 4},
                "dtype": {"enum": list(DTYPES + INDEX_DTYPES + MASK_DTYPES + FP8_DTYPES)},
                "range": {"type": "array", "items": bound, "minItems": 2, "maxItems": 2},
                "ignore_index": {"type": "integer"},
                "derive": {"type": "string"},
                "differentiable": {
                    "type": "boolean",
                    "description": "false: no gradient is derived for it (coda grad's --wrt "
                    "default skips it), as for positions, frequency tables and masks",
                },
                "doc": _DOC,
            },
            required=("shape", "dtype"),
        ),
        "gemm": _obj(
            {
                "a": {"type": "string", "pattern": OPERAND_RE},
                "b": {"type": "string", "pattern": OPERAND_RE},
            },
            required=("a", "b"),
        ),
        "epilogue": {"type": "array", "items": {"$ref": "#/$defs/epilogue_item"}},
        "kernel": _obj(
            {
                "kernel": _NAME,
                "doc": _DOC,
                "gemm": {"$ref": "#/$defs/gemm"},
                "epilogue": {"$ref": "#/$defs/epilogue"},
            },
            required=("kernel", "gemm", "epilogue"),
        ),
        "host": _obj(
            {
                "host": _NAME,
                "doc": _DOC,
                "over": _NAME,
                "body": {"$ref": "#/$defs/epilogue", "minItems": 1},
            },
            required=("host", "over", "body"),
        ),
        "finalize": _obj(
            {
                "finalize": {"enum": list(FINALIZE_OPS)},
                "of": _NAME,
                "as": _NAME,
                "n": DIM_REF,
                "eps": {"type": "number", "exclusiveMinimum": 0},
                "over": {
                    "enum": list(FINALIZE_OVER.values()),
                    "description": "fold the other axis too, to one [] scalar: rows for a "
                    "reduce_row partial, cols for a reduce_col one",
                },
                **{
                    k: {**_NAME, "description": f"the {k} partial (finalize: var)"}
                    for k in FINALIZE_SECONDS
                },
                "doc": _DOC,
            },
            required=("finalize", "of", "as"),
        ),
        "step": {"anyOf": [{"$ref": f"#/$defs/{k}"} for k in STEP_KINDS]},
        "steps": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/step"}},
        "outputs": _named_map(
            {
                # a dtype, or {dtype, differentiable, doc}: if/then/else (not anyOf) so that a
                # misspelt dtype is reported against the dtype list, with a did-you-mean
                "if": {"type": "string"},
                "then": {"enum": list(DTYPES + FP8_DTYPES)},
                "else": _obj(
                    {
                        "dtype": {"enum": list(DTYPES + FP8_DTYPES)},
                        "differentiable": {
                            "type": "boolean",
                            "description": "false: an output kept for the backward (a "
                            "statistic, a saved pre-activation) that receives no incoming "
                            "gradient (coda grad)",
                        },
                        "doc": _DOC,
                    },
                    required=("dtype",),
                ),
            },
            minProperties=1,
        ),
        "backward": _obj(
            {
                "doc": _DOC,
                "save": {"type": "array", "items": _NAME, "uniqueItems": True},
                "grads": _named_map(_NAME, minProperties=1),
                "recomputes": _named_map(_NAME),
                "steps": {"$ref": "#/$defs/steps"},
                "outputs": {"$ref": "#/$defs/outputs"},
            },
            required=("grads", "steps", "outputs"),
        ),
    }


def root_properties() -> dict:
    return {
        "coda": {"const": 1},
        "name": _NAME,
        "doc": _DOC,
        "dims": _named_map({"$ref": "#/$defs/dim"}),
        "tensors": _named_map({"$ref": "#/$defs/tensor"}, minProperties=1),
        "steps": {"$ref": "#/$defs/steps"},
        "outputs": {"$ref": "#/$defs/outputs"},
        "equivalent_to": {"type": "string"},
        "backward": {"$ref": "#/$defs/backward"},
        # candidate tile configs in --config syntax, the first every kernel's fallback; coda
        # build's --config overrides them (docs/tuning.md, "Candidates in the spec")
        "configs": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    }


ROOT_REQUIRED = ("coda", "name", "tensors", "steps", "outputs")


def build_schema() -> dict:
    """The full JSON Schema (draft 2020-12) of spec language v1."""
    prims = registry()
    defs = structure_defs()
    defs["epilogue_item"] = {"anyOf": [{"$ref": f"#/$defs/prim_{n}"} for n in sorted(prims)]}
    for name in sorted(prims):
        frag = dict(prims[name].schema)
        frag["description"] = prims[name].summary
        defs[f"prim_{name}"] = frag
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "coda fusion spec, language version 1",
        "description": "A chain of GEMM kernels with epilogue primitives; see "
        "docs/spec-language.md.",
        "type": "object",
        "properties": root_properties(),
        "required": list(ROOT_REQUIRED),
        "additionalProperties": False,
        "$defs": defs,
    }


def schema_json() -> str:
    return json.dumps(build_schema(), indent=2, sort_keys=True) + "\n"
