"""Stage ``validate`` (schema half): check a loaded spec against the JSON Schema, report ALL errors.

Why targeted validation
-----------------------
Validating the whole document against the composed schema makes jsonschema report ``anyOf``
failures ("is not valid under any of the given schemas") for every malformed step or epilogue
item. Instead we validate the root with steps and items left opaque, then dispatch each step on
its kind key (``kernel``/``host``/``finalize``) and each epilogue item on its primitive key to
that one fragment. Each jsonschema error is then rewritten into one located sentence with a
did-you-mean where a name was expected. The semantic half lives in ``analyze``.
"""

from __future__ import annotations

import copy
import math
import re

from jsonschema import Draft202012Validator

from coda_spec.check.source import Source
from coda_spec.config import parse_config
from coda_spec.errors import Diagnostic, SpecError, did_you_mean
from coda_spec.primitives import item_primitives, registry
from coda_spec.primitives.base import NAME_RE
from coda_spec.schema import ROOT_REQUIRED, STEP_KINDS, root_properties, structure_defs

_OPAQUE: dict = {}  # steps and items are checked one by one (_check_step, _check_item)
_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "object": "a mapping",
    "array": "a list",
    "boolean": "true/false",
}

# Mask dtype spellings users reach for that are not coda's (uint8 and bool are): the
# did-you-mean would offer int64 (8 bytes per element).
_MASK_DTYPES = ("int8", "u8", "i8", "boolean")


def _describe(value) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null (empty value)"
    return type(value).__name__


class _Checker:
    """Holds the compiled validators for one run (no module-level state)."""

    def __init__(self):
        defs = structure_defs()
        opaque = copy.deepcopy(defs)
        opaque["steps"]["items"] = _OPAQUE
        opaque["epilogue"]["items"] = _OPAQUE
        self.prims = registry()
        root = {
            "type": "object",
            "properties": root_properties(),
            "required": list(ROOT_REQUIRED),
            "additionalProperties": False,
        }
        self.root = self._validator(root, opaque)
        self.kinds = {k: self._validator({"$ref": f"#/$defs/{k}"}, opaque) for k in STEP_KINDS}
        self.items = {n: self._validator(p.schema, opaque) for n, p in self.prims.items()}
        self.item_fields = item_fields(self.prims)

    @staticmethod
    def _validator(schema: dict, defs: dict) -> Draft202012Validator:
        return Draft202012Validator({**schema, "$defs": defs})


def item_fields(prims) -> frozenset:
    """Every key an epilogue item may hold besides its primitive key (``as``, ``of``, ``by``,
    ``cap``, ...): the union of what the primitives' schemas declare, so a primitive with a new
    parameter needs no edit here. An item with no primitive key is reported at its first key
    outside this set, the likeliest misspelled primitive."""
    return frozenset(k for name, p in prims.items() for k in p.schema["properties"] if k != name)


def _schema_props(error) -> dict:
    schema = error.schema
    return schema.get("properties", {}) if isinstance(schema, dict) else {}


def _split_by_comma(key: str, value) -> bool:
    """Whether an unknown key looks like the tail of a value that a comma split off in a flow
    mapping: ``{doc: up projection (out, in)}`` is ``doc: up projection (out`` and a key
    ``in)`` with no value. Keys are names; a spaced one, or a valueless one that is no name,
    is text."""
    return " " in key.strip() or (value is None and re.fullmatch(NAME_RE, key) is None)


def _translate(src: Source, base: tuple, error) -> list[Diagnostic]:
    path = base + tuple(error.absolute_path)
    v, inst = error.validator, error.instance
    if v == "additionalProperties" and isinstance(inst, dict):
        allowed = _schema_props(error)
        out = []
        for key in inst:
            if key not in allowed:
                hint = (
                    _level_hint(src, path, key)
                    or did_you_mean(key, allowed)
                    or ("allowed keys: " + ", ".join(sorted(allowed)))
                )
                if _split_by_comma(key, inst[key]):
                    hint = "a comma inside {...} splits the mapping; quote the text that holds it"
                out.append(src.diag(path + (key,), f"unknown key '{key}'", hint, key=True))
        return out
    if v == "type" and len(path) == 2 and path[0] == "tensors" and not isinstance(inst, dict):
        slipped = _tensor_slip(src, path[1])
        if slipped is not None:
            return slipped
    if v == "required":
        missing = [k for k in error.validator_value if isinstance(inst, dict) and k not in inst]
        hints = {
            "as": "name the result, e.g. as: y",
            "coda": "start the file with 'coda: 1'",
            "outputs": "name each tensor it produces with its dtype, e.g. outputs: {dx: bf16}",
        }
        return [src.diag(path, f"missing required key '{k}'", hints.get(k, "")) for k in missing]
    if v == "enum":
        choices = ", ".join(map(str, error.validator_value))
        hint = did_you_mean(inst, error.validator_value) if isinstance(inst, str) else ""
        if path[-1:] == ("dtype",) and inst in _MASK_DTYPES:  # not a typo of int64: a mask
            hint = (
                "a one-byte 0/1 mask is dtype uint8 (or bool); loads read it as fp32 0/1 "
                "values, multiply by it"
            )
        return [src.diag(path, f"{_describe(inst)} is not one of: {choices}", hint)]
    if v == "const":
        if path == ("coda",):
            return [
                src.diag(
                    path, f"unsupported language version {inst!r}", "this coda reads 'coda: 1'"
                )
            ]
        return [src.diag(path, f"expected {error.validator_value!r}, got {_describe(inst)}")]
    if v == "type":
        want = error.validator_value
        want = " or ".join(
            _TYPE_NAMES.get(w, w) for w in (want if isinstance(want, list) else [want])
        )
        hint = (
            "quote it"
            if isinstance(inst, (bool, int, float)) and "string" in str(error.validator_value)
            else ""
        )
        if isinstance(inst, str) and str(error.validator_value) in ("number", "integer"):
            hint = _number_hint(path, inst, error.validator_value)
        return [src.diag(path, f"expected {want}, got {_describe(inst)}", hint)]
    if v == "pattern" and "propertyNames" in error.relative_schema_path:
        # A mapping key is not a name: point at the key itself, not at the mapping.
        return [
            src.diag(
                path + (inst,),
                f"{inst!r} is not a name",
                "names are letters, digits and '_', not starting with a digit",
                key=True,
            )
        ]
    if v == "pattern":
        if r"\.T" in error.validator_value:
            hint = "write the tensor's name, or NAME.T for its transpose"
            return [src.diag(path, f"{inst!r} is not a gemm operand (NAME or NAME.T)", hint)]
        return [
            src.diag(
                path,
                f"{inst!r} is not a name",
                "names are letters, digits and '_', not starting with a digit",
            )
        ]
    if v == "propertyNames":
        return [src.diag(path, f"{_describe(inst)} is not a valid name", "use letters, digits, _")]
    if v == "anyOf":
        consts = [o["const"] for o in error.validator_value if isinstance(o.get("const"), str)]
        hint = _anyof_hint(error.validator_value)
        close = did_you_mean(inst, consts) if isinstance(inst, str) else ""
        return [src.diag(path, f"{_describe(inst)} is not allowed here", close or hint)]
    if v in ("minItems", "maxItems") and error.schema.get("minItems") == error.schema.get(
        "maxItems"
    ):
        n = error.schema.get("minItems")
        return [src.diag(path, f"expected exactly {n} items, got {len(inst)}")]
    if v in _BOUNDS:
        key = path[-1] if path and isinstance(path[-1], str) else "it"
        bound = error.validator_value
        return [src.diag(path, f"{key} must be {_BOUNDS[v]} {bound}, got {_describe(inst)}")]
    if v == "minItems":
        return [src.diag(path, f"expected at least {error.validator_value} item(s)")]
    if v == "minProperties":
        return [src.diag(path, "must not be empty")]
    return [src.diag(path, error.message)]


_BOUNDS = {"exclusiveMinimum": ">", "minimum": ">=", "exclusiveMaximum": "<", "maximum": "<="}
_NUMBER_EXAMPLES = {"eps": "1.0e-6", "by": "0.5", "ignore_index": "-100"}


def _number_hint(path: tuple, text: str, want: str) -> str:
    """A word where a number belongs: show a number (or the quotes to remove)."""
    key = path[-1] if path and isinstance(path[-1], str) else ""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is not None and math.isfinite(value) and (want == "number" or value.is_integer()):
        return f"remove the quotes: {key + ': ' if key else ''}{text.strip()}"
    example = _NUMBER_EXAMPLES.get(key, "1.0e-6" if want == "number" else "4096")
    what = "an integer" if want == "integer" else "a number"
    return f"write {what}, e.g. " + (f"{key}: {example}" if key else example)


# Keys that belong to one level of a spec: a key found at another level is an indentation slip.
_TENSOR_KEYS = ("shape", "dtype", "range", "ignore_index", "derive", "doc")
_TOP_KEYS = ("dims", "tensors", "steps", "outputs", "equivalent_to", "backward")
_STEP_KEYS = ("gemm", "epilogue", "over", "body")
_BACKWARD_KEYS = ("save", "grads", "recomputes", "steps", "outputs")


def _level_hint(src: Source, path: tuple, key: str) -> str:
    """An unknown ``key`` that is a known key of another level: say where it belongs."""
    if path and path[0] == "backward" and len(path) > 1 and key in _BACKWARD_KEYS:
        return f"'{key}' belongs directly under backward:; unindent it to backward's other keys"
    if path and key in _TOP_KEYS:
        return f"'{key}' is a top-level key; unindent it to column 1"
    if path in ((), ("backward",)) and key in _STEP_KEYS:
        section = path + ("steps",)
        steps = _get(src.data, section)
        if isinstance(steps, list) and steps:
            line, _ = src.where(section + (len(steps) - 1,))
            return f"'{key}' belongs to a step; indent it under the step at line {line}"
        return f"'{key}' belongs to a step; indent it under one in steps:"
    if path == () and key in _TENSOR_KEYS:
        return f"'{key}' belongs to a tensor; indent it under one in tensors:"
    if path == () and key in ("save", "grads", "recomputes"):
        return f"'{key}' belongs under backward:; indent it there"
    return ""


def _get(data, path: tuple):
    for part in path:
        if not isinstance(data, (dict, list)):
            return None
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _tensor_slip(src: Source, name: str) -> list[Diagnostic] | None:
    """A tensor entry that is not a mapping, at the level of tensor names: explain the indent.

    ``derive: ...`` (any per-tensor key) indented like a tensor name becomes a tensor of that
    name; a tensor name whose keys were not indented becomes an empty tensor. Returns the
    diagnostics (possibly none: an empty tensor above already explains a slipped key), or None
    when this is not an indentation slip.
    """
    tensors = src.data.get("tensors")
    names = list(tensors) if isinstance(tensors, dict) else []
    if name not in names:
        return None
    value = tensors[name]
    if value is None and name not in _TENSOR_KEYS:
        below = []
        for later in names[names.index(name) + 1 :]:
            if later not in _TENSOR_KEYS:
                break
            below.append(later)
        if not below:
            return None
        return [
            src.diag(
                ("tensors", name),
                f"tensor '{name}' is empty",
                f"indent {', '.join(repr(k) for k in below)} under '{name}' "
                "(its keys sit at the level of tensor names)",
                key=True,
            )
        ]
    if name not in _TENSOR_KEYS:
        return None
    owner = next((n for n in reversed(names[: names.index(name)]) if n not in _TENSOR_KEYS), None)
    path = ("tensors", name)
    msg = f"'{name}' is at the level of tensor names, so it reads as a tensor"
    if owner is None:
        hint = f"put '{name}' under a tensor name, e.g. x: {{shape: [M, D], dtype: bf16}}"
        return [src.diag(path, msg, hint, key=True)]
    if tensors[owner] is None:
        return []  # the empty tensor above is reported with the fix
    first = next(iter(tensors[owner]), None) if isinstance(tensors[owner], dict) else None
    hint = f"indent '{name}' under tensor '{owner}'"
    if first is not None:
        line, col = src.where(("tensors", owner, first), key=True)
        if line != src.where(("tensors", owner), key=True)[0]:
            hint += f" (column {col}, like its '{first}')"
        else:
            hint = f"move '{name}' into tensor '{owner}''s {{...}}"
    return [src.diag(path, msg, hint, key=True)]


def _anyof_hint(options) -> str:
    kinds = []
    for o in options:
        if "$ref" in o:
            kinds.append(o["$ref"].rsplit("/", 1)[-1])
        elif "const" in o:
            kinds.append(repr(o["const"]))
        elif "type" in o:
            kinds.append(_TYPE_NAMES.get(o["type"], o["type"]))
    return "expected " + " or ".join(kinds) if kinds else ""


def _check(checker_validator, src, base, instance, out):
    for error in sorted(checker_validator.iter_errors(instance), key=lambda e: list(e.path)):
        out.extend(_translate(src, base, error))


def _check_item(ck: _Checker, src: Source, path: tuple, item, out: list):
    if not isinstance(item, dict):
        out.append(
            src.diag(
                path,
                f"epilogue item must be a mapping, got {_describe(item)}",
                "e.g. - {relu: acc, as: y}",
            )
        )
        return
    prims = item_primitives(item, ck.prims)
    if len(prims) > 1:
        out.append(
            src.diag(
                path,
                "one item holds primitives " + ", ".join(map(repr, prims)),
                "write one primitive per item",
            )
        )
        return
    if not prims:
        unknown = [k for k in item if k not in ck.item_fields] or list(item)[:1]
        if not unknown:
            out.append(src.diag(path, "empty epilogue item"))
            return
        key = unknown[0]
        out.append(
            src.diag(
                path + (key,),
                f"unknown primitive '{key}'",
                did_you_mean(key, ck.prims) or "run 'coda primitives' for the list",
                key=True,
            )
        )
        return
    _check(ck.items[prims[0]], src, path, item, out)


def _check_step(ck: _Checker, src: Source, path: tuple, step, out: list):
    if not isinstance(step, dict):
        out.append(src.diag(path, f"step must be a mapping, got {_describe(step)}"))
        return
    kinds = [k for k in STEP_KINDS if k in step]
    if len(kinds) != 1:
        if kinds:
            msg, hint = "a step has exactly one kind; found " + ", ".join(kinds), ""
        else:
            guess = [(k, did_you_mean(k, STEP_KINDS)) for k in step]
            key, hint = next(((k, g) for k, g in guess if g), (None, ""))
            msg = "step has no kind (kernel, host or finalize)"
            if key is not None:  # point at the misspelled kind
                out.append(src.diag(path + (key,), msg, hint, key=True))
                return
            hint = "start it with kernel:, host: or finalize:"
        out.append(src.diag(path, msg, hint))
        return
    _check(ck.kinds[kinds[0]], src, path, step, out)
    body = "epilogue" if kinds[0] == "kernel" else "body"
    items = step.get(body)
    if isinstance(items, list):
        for i, item in enumerate(items):
            _check_item(ck, src, path + (body, i), item, out)


def validate_source(src: Source) -> None:
    """Raise SpecError with every schema error of ``src``; return None when it conforms."""
    out: list[Diagnostic] = []
    data = src.data
    if not isinstance(data, dict):
        raise SpecError(
            [
                src.diag(
                    (),
                    f"a spec is a mapping at top level, got {_describe(data)}",
                    "start with 'coda: 1' and 'name: ...'",
                )
            ]
        )
    ck = _Checker()
    _check(ck.root, src, (), data, out)
    for section in (("steps",), ("backward", "steps")):
        node = data
        for key in section:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, list):
            for i, step in enumerate(node):
                _check_step(ck, src, section + (i,), step, out)
    out += _config_errors(src, data.get("configs"))
    if out:
        raise SpecError(sorted(_dedupe(_drop_knock_ons(out)), key=lambda d: (d.line, d.col)))


def _split_configs(src: Source, configs) -> dict:
    """``configs: [128x128,cluster=2x1,cooperative]``: YAML reads an unquoted flow list's
    commas as item separators, so one config becomes three items. {index of the first item:
    the items it swallowed}, for each run of unquoted items after a tile item that name no
    tile of their own, written without a space after the commas (``[128x128, pingpong]`` is
    two candidates as meant; ``cooperative`` alone is a config)."""
    items = configs if isinstance(configs, list) else []

    def tile(text) -> bool:
        return any("x" in p and p.replace("x", "").isdigit() for p in text.split(","))

    def unquoted(i) -> bool:
        line, col = src.where(("configs", i))
        text = src.lines[line - 1] if 0 < line <= len(src.lines) else ""
        return text[col - 1 : col] not in ("'", '"') and "[" in text[: col - 1]

    runs, i = {}, 0
    while i < len(items):
        j = i + 1
        if isinstance(items[i], str) and tile(items[i]) and unquoted(i):
            while j < len(items) and isinstance(items[j], str) and not tile(items[j]):
                if not unquoted(j):
                    break
                j += 1
        line = src.lines[src.where(("configs", i))[0] - 1] if j > i + 1 else ""
        while j > i + 1 and ",".join(items[i:j]) not in line:  # written a, b: meant as items
            j -= 1
        if j > i + 1:
            runs[i] = list(range(i + 1, j))
        i = j
    return runs


def _config_errors(src: Source, configs) -> list[Diagnostic]:
    """``configs:`` texts that ``--config`` would refuse (the schema checked they are strings)."""
    out, seen = [], {}
    split = _split_configs(src, configs)
    swallowed = {j for run in split.values() for j in run}
    for first, run in split.items():
        whole = ",".join(configs[k] for k in (first, *run))
        out.append(
            src.diag(
                ("configs", first),
                f"YAML read '{whole}' as {len(run) + 1} configs: in [...] a comma separates items",
                f'quote it: configs: ["{whole}"]',
            )
        )
    for i, text in enumerate(configs if isinstance(configs, list) else ()):
        if not isinstance(text, str) or i in swallowed:
            continue
        try:
            config = parse_config(text)
        except ValueError as e:
            out.append(src.diag(("configs", i), str(e), "fix the config text"))
            continue
        for p in config.problems():
            out.append(src.diag(("configs", i), f"{text!r}: {p}", "pick another tile"))
        if config in seen:
            out.append(
                src.diag(
                    ("configs", i),
                    f"{text!r} is configs[{seen[config]}] again",
                    "list each candidate once",
                )
            )
        seen.setdefault(config, i)
    return out


def _drop_knock_ons(diags: list[Diagnostic]) -> list[Diagnostic]:
    """A key reported as indented to the wrong level is not also 'missing' where it belongs."""
    slipped = {
        d.path.rsplit(".", 1)[-1]
        for d in diags
        if "indent" in d.hint and (d.message.startswith("unknown key") or "level of" in d.message)
    }
    return [
        d
        for d in diags
        if not (d.message.startswith("missing required key '") and _quoted(d.message) in slipped)
    ]


def _quoted(message: str) -> str:
    """The first 'quoted' word of a message."""
    parts = message.split("'")
    return parts[1] if len(parts) > 2 else ""


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen, out = set(), []
    for d in diags:
        key = (d.line, d.col, d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out
