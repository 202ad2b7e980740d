"""Generate the primitive reference of docs/spec-language.md from the registry.

``python -m coda_spec.docgen`` rewrites the section between the GENERATED markers; a test fails
when the checked-in page is stale, so the docs can never drift from the primitives;
``--check`` only compares, and exits ``EXIT_TOOL_FAILURE`` when the page is stale.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from coda_spec.errors import EXIT_OK, EXIT_TOOL_FAILURE
from coda_spec.primitives import registry
from coda_spec.primitives.base import FAMILIES

DOC = Path(__file__).resolve().parent.parent / "docs" / "spec-language.md"
BEGIN = "<!-- BEGIN GENERATED PRIMITIVES (python -m coda_spec.docgen) -->"
END = "<!-- END GENERATED PRIMITIVES -->"
# a YAML block that is part of a spec, not a whole one: tests/test_docs.py checks every other
# YAML block of the docs as a spec, and skips only the ones so marked
FRAGMENT = "<!-- yaml: fragment -->"
TITLES = {
    "elementwise": "Elementwise",
    "pair": "Pairs (adjacent columns)",
    "vector": "Vector loads and per-row values",
    "tile": "Tiles: extra inputs and outputs",
    "reduction": "Reductions",
    "stateful": "Stateful: prepass statistics",
}


def _body(name: str) -> str:
    mod = importlib.import_module(f"coda_spec.primitives.{name}")
    doc = (mod.__doc__ or "").strip().split("\n", 1)
    return doc[1].strip() if len(doc) > 1 else ""


def _describe(schema: dict) -> str:
    """A parameter's schema fragment in a few words (``a number > 0``, ``one of bf16, fp16``)."""
    if "description" in schema:
        return schema["description"]
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    if "anyOf" in schema:
        return " or ".join(_describe(o) for o in schema["anyOf"])
    kind = {"number": "a number", "integer": "an integer", "string": "a name"}.get(
        schema.get("type"), str(schema.get("type", "a value"))
    )
    bounds = (("exclusiveMinimum", ">"), ("minimum", ">="), ("maximum", "<="))
    return kind + "".join(f" {op} {schema[k]}" for k, op in bounds if k in schema)


def _parameters(p) -> str:
    """``Parameters: ...`` for the keys an item holds besides its ports, ``as`` and ``doc``."""
    props, required = p.schema["properties"], set(p.schema.get("required", ()))
    skip = {p.name, "as", "doc", *p.operands, *p.tensors}
    shown = [
        f"`{k}` ({_describe(v)}{', required' if k in required else ', optional'})"
        for k, v in props.items()
        if k not in skip
    ]
    return "Parameters: " + "; ".join(shown) + "." if shown else ""


def render() -> str:
    prims = registry()
    out = [
        BEGIN,
        "",
        "## Primitive reference",
        "",
        f"{len(prims)} primitives in {len(FAMILIES)} families. Run `coda primitives` for the "
        "one-line list.",
        "",
    ]
    for fam in FAMILIES:
        out += [f"### {TITLES[fam]}", ""]
        for name in sorted(n for n, p in prims.items() if p.family == fam):
            p = prims[name]
            ports = ", ".join(f"`{k}`" for k in p.operands) or "none"
            tensors = ", ".join(f"`{k}`" for k in p.tensors) or "none"
            out += [f"#### `{name}`", "", p.summary, "", FRAGMENT, "```yaml", p.example, "```", ""]
            body = _body(name)
            if body:
                out += [body, ""]
            out += [f"Reads values: {ports}. Reads chain tensors: {tensors}.", ""]
            out += [f"Lowers in: {p.lowers_in()}.", ""]
            params = _parameters(p)
            if params:
                out += [params, ""]
    out.append(END)
    return "\n".join(out)


def updated(text: str) -> str:
    head, _, rest = text.partition("<!-- BEGIN GENERATED PRIMITIVES")
    _, _, tail = rest.partition(END)
    return head + render() + tail


if __name__ == "__main__":
    new = updated(DOC.read_text())
    if "--check" in sys.argv:
        sys.exit(EXIT_OK if new == DOC.read_text() else EXIT_TOOL_FAILURE)
    DOC.write_text(new)
