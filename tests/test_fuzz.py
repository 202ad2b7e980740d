"""Fuzzing ``coda check``: no input, however hostile, may crash it.

Every input must either pass every check stage or raise :class:`SpecError` whose diagnostics are
all located (file set, line >= 0 and within the file, col >= 0, message non-empty): the library
half of the one oracle for invalid specs, ``tests.conftest.check_oracle``. Anything else
(KeyError, TypeError, RecursionError, ...) is a bug in coda.

Three families:

a. raw input: random bytes, random text and YAML-flavoured text go through the loader
   (``decode_bytes`` + ``parse_text``) and the checker (``check_source``);
b. structure-aware mutations of every bundled ``specs/*.yaml``: load it, apply one to three
   mutations to the data (delete or rename a key, replace a value by another type, duplicate,
   delete or swap list items, swap names, change a number, change dims, insert a known or unknown
   primitive, edit or inflate a string), re-serialize with ``yaml.safe_dump`` and check it;
c. text-level edits of every bundled spec (truncate, delete/duplicate/swap lines, re-indent, tabs,
   insert YAML punctuation): what a hand edit gone wrong looks like.

The runs are deterministic (``derandomize=True``) and bounded (about 2,800 examples in all,
whatever the number of specs). To hunt for new crashes, set ``CODA_FUZZ_EXAMPLES=20000`` (random
seed, that many examples per test). Run with ``-s`` to see the example counts and how far the
examples got: valid, or refused at load, validate, normalize or analyze (``CHECK_STAGES``).

The structure-aware family (b.) is the ``slow`` tier (about 30 s); a. and c. run in the quick
one.
"""

from __future__ import annotations

import copy
import os
import re
import string
from collections import Counter

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coda_spec.check.frontend import CHECK_STAGES
from coda_spec.check.source import load_source
from coda_spec.primitives import registry
from tests.conftest import SPECS, check_oracle

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HUNT = int(os.environ.get("CODA_FUZZ_EXAMPLES", "0"))


def _settings(examples: int):
    """Deterministic and bounded by default; CODA_FUZZ_EXAMPLES=N hunts with a random seed."""
    return settings(
        max_examples=_HUNT or examples,
        derandomize=not _HUNT,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


# ---------------------------------------------------------------------------------------------
# The oracle: tests.conftest.check_oracle, library half (every example would double in cost
# through the CLI; tests/test_robustness.py runs the CLI half on the hostile files).


def check_text(file: str, text: str) -> str:
    """Every check stage on ``text``; 'valid' or the stage that refused it. Crashes propagate."""
    return check_oracle(data=text, name=file, cli=False).stage


def check_bytes(file: str, raw: bytes) -> str:
    """As :func:`check_text`, through the loader's size and encoding gate first."""
    return check_oracle(data=raw, name=file, cli=False).stage


@pytest.fixture(scope="module")
def stats():
    """Per-test outcome counters; the summary prints at module teardown (visible with -s)."""
    table: dict[str, Counter] = {}
    yield table
    print("\n\nfuzz summary: examples; fraction valid / refused at each check stage")
    grand = Counter()
    for name, c in sorted(table.items()):
        grand.update(c)
        print(f"  {name:<40} {_row(c)}")
    print(f"  {'all':<40} {_row(grand)}")


OUTCOMES = ("valid", *(name for name, _ in CHECK_STAGES))


def _row(c: Counter) -> str:
    total = max(sum(c[k] for k in OUTCOMES), 1)
    parts = [f"{c[k] / total:6.1%} {k}" for k in OUTCOMES]
    unchanged = f" ({c['unchanged']} valid ones unchanged)" if c["unchanged"] else ""
    return f"{total:6d} examples: " + ", ".join(parts) + unchanged


def _count(stats, name: str, outcome: str) -> None:
    stats.setdefault(name, Counter())[outcome] += 1


# ---------------------------------------------------------------------------------------------
# a. raw bytes and text

YAML_ALPHABET = "[]{}:,-?&*!|>'\"%@`#\n\t \r" + "abcxyz_019.eE+" + "\ufeff\u00e9\u2028\x85\x00"
YAML_WORDS = st.sampled_from(
    [
        "coda: 1\n",
        "name: x\n",
        "steps:\n",
        "  - kernel: k\n",
        "    gemm: {a: x, b: w.T}\n",
        "    epilogue: [{relu: acc, as: y}, {store: y}]\n",
        "tensors: {x: {shape: [M, D], dtype: bf16}}\n",
        "outputs: {y: bf16}\n",
        "dims: {M: dynamic, D: 64}\n",
        "&a ",
        "*a ",
        "<<: ",
        "!!python/object:os.system ",
        "---\n",
        "...\n",
        "? ",
        "[",
        "{",
        "]",
        "}",
        "- ",
        "  ",
        "\t",
        "|\n",
        ">-\n",
        "'",
        '"',
        "\\",
        "1e-6",
        ".inf",
        "~",
        "%YAML 1.1\n",
        "%TAG ! tag:x,2000:\n",
    ]
)


@_settings(300)
@given(raw=st.binary(max_size=400))
def test_random_bytes(raw, stats):
    _count(stats, "a.random_bytes", check_bytes("fuzz.yaml", raw))


@_settings(300)
@given(text=st.text(max_size=300))
def test_random_text(text, stats):
    _count(stats, "a.random_text", check_text("fuzz.yaml", text))


@_settings(500)
@given(
    text=st.one_of(
        st.text(alphabet=YAML_ALPHABET, max_size=200),
        st.lists(YAML_WORDS, max_size=30).map("".join),
    )
)
def test_yaml_flavoured_text(text, stats):
    _count(stats, "a.yaml_flavoured_text", check_bytes("fuzz.yaml", text.encode("utf-8")))


# ---------------------------------------------------------------------------------------------
# b. structure-aware mutations of the bundled specs


def _nodes(data, path=()):
    yield path, data
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _nodes(v, path + (i,))


def _get(data, path):
    for p in path:
        data = data[p]
    return data


def _set(data, path, value):
    _get(data, path[:-1])[path[-1]] = value


def _names(data) -> list[str]:
    return sorted({v for _, v in _nodes(data) if isinstance(v, str) and NAME.match(v)})


def _small_edit(draw, s: str) -> str:
    """Insert, delete or replace one character (a typo)."""
    alphabet = string.ascii_lowercase + "_0"
    i = draw(st.integers(0, len(s)))
    how = draw(st.sampled_from(["insert", "delete", "replace", "swapcase", "suffix"]))
    if how == "insert" or not s:
        return s[:i] + draw(st.sampled_from(alphabet)) + s[i:]
    i = min(i, len(s) - 1)
    if how == "delete":
        return s[:i] + s[i + 1 :]
    if how == "replace":
        return s[:i] + draw(st.sampled_from(alphabet)) + s[i + 1 :]
    if how == "swapcase":
        return s.swapcase()
    return s + draw(st.sampled_from(["s", "_2", ".T", "x"]))


def _other_value(draw, names: list[str]):
    """A value of some (usually other) type."""
    return draw(
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-3, 10),
            st.integers(-(2**70), 2**70),
            st.floats(allow_nan=True, allow_infinity=True),
            st.sampled_from(["", "acc", "dynamic", "bf16", "int32", "M", "2*D", "x.T", "1e-6"]),
            st.sampled_from(names),
            st.text(max_size=8),
            st.lists(st.sampled_from(names), max_size=3),
            st.dictionaries(st.sampled_from(names), st.sampled_from(names), max_size=2),
        )
    )


class _Nothing(Exception):
    """The drawn mutation has nothing to act on in this document; try another."""


def _pick(draw, items, label):
    if not items:
        raise _Nothing(label)
    return items[draw(st.integers(0, len(items) - 1), label=label)]


def _dicts(data):
    return [(p, v) for p, v in _nodes(data) if isinstance(v, dict) and v]


def _lists(data):
    return [(p, v) for p, v in _nodes(data) if isinstance(v, list) and v]


def _leaves(data, kinds):
    return [
        (p, v)
        for p, v in _nodes(data)
        if p and isinstance(v, kinds) and not (isinstance(v, bool) and bool not in kinds)
    ]


def m_delete_key(draw, data, names):
    path, d = _pick(draw, _dicts(data), "dict")
    key = _pick(draw, list(d), "key")
    del d[key]
    return f"delete {path + (key,)}"


def m_rename_key(draw, data, names):
    path, d = _pick(draw, _dicts(data), "dict")
    key = _pick(draw, list(d), "key")
    new = _small_edit(draw, key)
    items = [(new if k == key else k, v) for k, v in d.items()]
    d.clear()
    d.update(items)  # a rename onto an existing key drops one entry, as a user's edit would
    return f"rename {path + (key,)} -> {new!r}"


def m_replace_value(draw, data, names):
    nodes = [(p, v) for p, v in _nodes(data) if p]
    path, _ = _pick(draw, nodes, "node")
    value = _other_value(draw, names)
    _set(data, path, value)
    return f"replace {path} with {value!r}"


def m_list_op(draw, data, names):
    path, lst = _pick(draw, _lists(data), "list")
    i = draw(st.integers(0, len(lst) - 1))
    j = draw(st.integers(0, len(lst) - 1).filter(lambda j: j != i or len(lst) == 1))
    how = draw(st.sampled_from(["duplicate", "delete", "swap", "move"]))
    if how == "duplicate":
        lst.insert(i + 1, copy.deepcopy(lst[i]))
    elif how == "delete":
        del lst[i]
    elif how == "swap":
        lst[i], lst[j] = lst[j], lst[i]
    else:
        lst.insert(j, lst.pop(i))
    return f"{how} {path}[{i}] ({j})"


def m_swap_names(draw, data, names):
    leaves = [(p, v) for p, v in _leaves(data, (str,)) if NAME.match(v)]
    pa, a = _pick(draw, leaves, "a")
    pb, b = _pick(draw, [(p, v) for p, v in leaves if v != a], "b")
    if draw(st.booleans(), label="everywhere"):
        for p, v in leaves:  # rename one name everywhere it appears (values, not keys)
            if v == a:
                _set(data, p, b)
        return f"rename every {a!r} -> {b!r}"
    _set(data, pa, b)
    _set(data, pb, a)
    return f"swap {pa}={a!r} <-> {pb}={b!r}"


def m_change_number(draw, data, names):
    leaves = _leaves(data, (int, float))
    if not leaves:
        return "no numbers"
    path, v = _pick(draw, leaves, "number")
    new = draw(
        st.sampled_from([v + 1, v - 1, 0, -v, v * 2, v // 2 if isinstance(v, int) else v / 2, 1, 7])
    )
    _set(data, path, new)
    return f"number {path}: {v!r} -> {new!r}"


def m_change_dims(draw, data, names):
    dims = data.get("dims") if isinstance(data, dict) else None
    dim_names = list(dims) if isinstance(dims, dict) else []
    exprs = dim_names + [f"2*{d}" for d in dim_names] + [f"{d}/2" for d in dim_names]
    exprs += [f"{d}/0" for d in dim_names[:1]] + [f"{d}-{d}" for d in dim_names[:1]]
    exprs += ["UNDECLARED", "((", "1.5", "-8", "0"]
    if dim_names and draw(st.booleans(), label="in dims"):
        name = _pick(draw, dim_names, "dim")
        new = draw(
            st.one_of(
                st.sampled_from([1, 2, 3, 7, 8, 16, 64, 4097, "dynamic", 0, -1]),
                st.integers(1, 10**5),
            )
        )
        dims[name] = new
        return f"dims.{name} = {new!r}"
    shapes = [
        (p, v)
        for p, v in _nodes(data)
        if len(p) >= 2 and p[-1] == "shape" and isinstance(v, list) and v
    ]
    if not shapes:
        return "no shapes"
    path, shape = _pick(draw, shapes, "shape")
    how = draw(st.sampled_from(["set", "append", "drop", "swap"]))
    if how == "set" and exprs:
        shape[draw(st.integers(0, len(shape) - 1))] = _pick(draw, exprs, "expr")
    elif how == "append":
        shape.append(_pick(draw, exprs, "expr") if exprs else 1)
    elif how == "drop":
        shape.pop()
    else:
        shape.reverse()
    return f"shape {path} {how} -> {shape!r}"


def m_insert_primitive(draw, data, names):
    bodies = [
        (p, v)
        for p, v in _nodes(data)
        if p and p[-1] in ("epilogue", "body") and isinstance(v, list)
    ]
    if not bodies:
        return "no epilogue"
    path, body = _pick(draw, bodies, "body")
    prims = registry()
    if draw(st.booleans(), label="unknown"):
        item = {draw(st.sampled_from(["frobnicate", "rleu", "reduce", "kernel"])): "acc", "as": "z"}
    else:
        p = prims[draw(st.sampled_from(sorted(prims)))]
        item = yaml.safe_load(p.example)[0]
        for k, v in list(item.items()):  # rewire some of its names to the spec's own
            if isinstance(v, str) and NAME.match(v) and draw(st.booleans()):
                item[k] = draw(st.sampled_from(names + ["acc"]))
    body.insert(draw(st.integers(0, len(body))), item)
    return f"insert {item!r} into {path}"


def m_edit_string(draw, data, names):
    leaves = _leaves(data, (str,))
    path, v = _pick(draw, leaves, "string")
    how = draw(st.sampled_from(["typo", "typo", "drop line", "inflate"]), label="string edit")
    if how == "inflate":  # deep or long expressions: parsers and evaluators must not overflow
        k = draw(st.sampled_from([2, 50, 150, 1000, 5000]))
        shape = draw(st.sampled_from(["neg", "parens", "sum", "product"]))
        lines = v.splitlines() or [v]
        i = draw(st.integers(0, len(lines) - 1))
        lhs, eq, rhs = lines[i].rpartition("=") if "=" in lines[i] else ("", "", lines[i])
        rhs = rhs.strip()[:40] or "x"  # keep the text small: depth is the point, not size
        rhs = {
            "neg": "-" * k + rhs,
            "parens": "(" * k + rhs + ")" * k,
            "sum": " + ".join([rhs] * k),
            "product": "*".join(["2"] * k + [rhs]),
        }[shape]
        lines[i] = f"{lhs}{eq} {rhs}" if eq else rhs
        new = "\n".join(lines)
    elif how == "drop line" and "\n" in v.strip():
        lines = v.splitlines()
        if lines:
            del lines[draw(st.integers(0, len(lines) - 1))]
        new = "\n".join(lines)
    else:
        new = _small_edit(draw, v)
    _set(data, path, new)
    return f"edit {path}: {new[:40]!r}"


# Mutations that usually keep the document schema-valid come first and twice, so that about half
# the examples get past the schema into semantic analysis, where the subtler crashes would hide.
MUTATIONS = (
    m_swap_names,
    m_change_dims,
    m_insert_primitive,
    m_list_op,
    m_change_number,
    m_swap_names,
    m_change_dims,
    m_insert_primitive,
    m_list_op,
    m_change_number,
    m_delete_key,
    m_rename_key,
    m_replace_value,
    m_edit_string,
)


@st.composite
def mutated(draw, data):
    data = copy.deepcopy(data)
    names = _names(data) or ["x"]
    log = []
    for _ in range(draw(st.integers(1, 3), label="n mutations")):
        if not isinstance(data, dict) or not data:
            break
        mutation = draw(st.sampled_from(MUTATIONS))
        try:
            log.append(mutation(draw, data, names))
        except _Nothing as e:
            log.append(f"{mutation.__name__}: no {e}")
    return data, log


def _per_spec_examples() -> int:
    # A fixed budget for the whole catalogue so the file stays fast as specs are added.
    return max(40, 1200 // max(len(SPECS), 1))


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_mutated_specs(spec, stats):
    base = load_source(spec).data
    assert check_text(str(spec), spec.read_text(encoding="utf-8")) == "valid"

    @_settings(_per_spec_examples())
    @given(case=mutated(base))
    def run(case):
        data, log = case
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
        try:
            outcome = check_bytes(spec.name, text.encode("utf-8"))  # with the size limit
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 - report the mutations that crashed it
            raise AssertionError(f"{type(e).__name__}: {e} after mutations {log}") from e
        _count(stats, f"b.mutated[{spec.stem}]", outcome)
        if data == base:  # e.g. a name swapped with itself: counted, and reported apart
            _count(stats, f"b.mutated[{spec.stem}]", "unchanged")

    run()


# ---------------------------------------------------------------------------------------------
# c. text-level mutations of the bundled specs (what a hand edit gone wrong looks like)


@st.composite
def text_mutated(draw, text: str):
    log = []
    for _ in range(draw(st.integers(1, 3), label="n edits")):
        lines = text.split("\n")
        i = draw(st.integers(0, len(lines) - 1), label="line")
        j = draw(st.integers(0, len(lines) - 1), label="other line")
        how = draw(
            st.sampled_from(
                ["truncate", "delete", "duplicate", "swap", "indent", "dedent", "tab", "insert"]
            )
        )
        if how == "truncate":
            text = text[: draw(st.integers(0, len(text)))]
        else:
            if how == "delete":
                del lines[i]
            elif how == "duplicate":
                lines.insert(j, lines[i])
            elif how == "swap":
                lines[i], lines[j] = lines[j], lines[i]
            elif how == "indent":
                lines[i] = " " * draw(st.integers(1, 4)) + lines[i]
            elif how == "dedent":
                lines[i] = lines[i][draw(st.integers(1, 4)) :]
            elif how == "tab":
                lines[i] = "\t" + lines[i].lstrip(" ")
            else:
                at = draw(st.integers(0, len(lines[i])))
                snippet = draw(
                    st.one_of(YAML_WORDS, st.text(YAML_ALPHABET, min_size=1, max_size=3))
                )
                lines[i] = lines[i][:at] + snippet + lines[i][at:]
            text = "\n".join(lines)
        log.append(f"{how} {i} {j}")
    return text, log


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_text_mutated_specs(spec, stats):
    original = spec.read_text(encoding="utf-8")

    @_settings(max(20, 500 // max(len(SPECS), 1)))
    @given(case=text_mutated(original))
    def run(case):
        text, log = case
        try:
            outcome = check_bytes(spec.name, text.encode("utf-8"))
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 - report the edits that crashed it
            raise AssertionError(f"{type(e).__name__}: {e} after edits {log}") from e
        _count(stats, f"c.text_mutated[{spec.stem}]", outcome)

    run()


def test_bundled_specs_exist():
    assert SPECS, "no specs/*.yaml to mutate"


# ---------------------------------------------------------------------------------------------
# d. the audit's fuzz, through `coda check --math` (a folder run): delete a line, swap two
# tokens of a line, change a number; on every bundled spec, once anywhere and once inside its
# equivalent_to or derive expressions (where the proof evaluates what a mutation broke). No
# mutant may end in exit 1 (an internal error: "retry" to CI) or print a traceback, and the
# folder run must report every file. The mutants are drawn with a fixed seed; the proof's
# coverage search (which runs on proven specs only, re-evaluating the same programs) is off to
# keep the run to seconds.

TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d+)?(?:e-?\d+)?|[^\s\w]")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?")
NUMBERS = ("0", "1", "-1", "2", "3", "1.5", "-1.5", "7")  # small: a huge dim is a huge proof
FUZZ_SEED = 31


def _program_lines(lines: list[str]) -> list[int]:
    """The indices of the lines of ``equivalent_to`` (a block) and of ``derive:`` entries."""
    out, inside, indent = [], False, 0
    for i, line in enumerate(lines):
        body = line.lstrip()
        depth = len(line) - len(body)
        if inside and body and depth <= indent:
            inside = False
        if (inside and body) or "derive:" in line:
            out.append(i)
        if body.startswith("equivalent_to:"):
            inside, indent = True, depth
    return out


def audit_mutant(text: str, kind: str, rng, in_programs: bool) -> str | None:
    """``text`` with one edit of ``kind`` ('delete', 'swap' or 'number') on a line drawn by
    ``rng``: any line, or one of the expressions'; None when no line qualifies."""
    lines = text.split("\n")
    pool = _program_lines(lines) if in_programs else range(len(lines))
    need = {"delete": None, "swap": lambda s: len(TOKEN.findall(s)) >= 2, "number": NUMBER.search}
    ok = need[kind] or (lambda s: True)
    pool = [i for i in pool if lines[i].strip() and ok(lines[i])]
    if not pool:
        return None
    i = rng.choice(pool)
    line = lines[i]
    if kind == "delete":
        del lines[i]
    elif kind == "swap":
        tokens = list(TOKEN.finditer(line))
        a, b = sorted(rng.sample(tokens, 2), key=lambda m: m.start())
        lines[i] = (
            line[: a.start()] + b.group() + line[a.end() : b.start()] + a.group() + line[b.end() :]
        )
    else:
        m = rng.choice(list(NUMBER.finditer(line)))
        n = float(m.group())
        near = (str(int(n) + 1), str(int(n) // 2)) if n == int(n) else ()
        new = rng.choice([x for x in (*NUMBERS, *near) if x != m.group()])
        lines[i] = line[: m.start()] + new + line[m.end() :]
    return "\n".join(lines)


def audit_mutants(specs, seed: int = FUZZ_SEED):
    """(file name, text) of each spec's mutants: one per kind, on any line or (a coin toss)
    on an expression's line."""
    import random
    import zlib

    for spec in specs:
        text = spec.read_text(encoding="utf-8")
        rng = random.Random(seed * 1_000_003 + zlib.crc32(spec.name.encode()))
        for kind in ("delete", "swap", "number"):
            in_programs = rng.random() < 0.5
            new = audit_mutant(text, kind, rng, in_programs)
            if new is not None and new != text:
                yield f"{spec.stem}-{kind}{'-expr' if in_programs else ''}.yaml", new


@pytest.mark.slow
def test_audit_fuzz_check_math_never_exits_1(tmp_path, monkeypatch):
    from functools import partial

    from coda_spec import cli
    from coda_spec.errors import EXIT_TOOL_FAILURE
    from coda_spec.prove.mathcheck import prove
    from tests.conftest import coda_check

    monkeypatch.setattr(cli, "prove", partial(prove, coverage=False))
    names = []
    for name, text in audit_mutants(SPECS):
        (tmp_path / name).write_text(text, encoding="utf-8")
        names.append(name)
    assert len(names) >= 2 * len(SPECS)
    res = coda_check("--math", "-q", tmp_path)  # asserts: no traceback, no internal error
    assert res.exit_code != EXIT_TOOL_FAILURE, res.output[-3000:]
    assert res.summary is not None and int(res.summary.group(1)) == len(names), res.output[-500:]
