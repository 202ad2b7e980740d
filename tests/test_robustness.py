"""Hostile inputs: ``coda check`` accepts the spec or reports located errors, never crashes.

Each case is a file's bytes and the outcome it must have: ``valid`` (exit 0), ``invalid`` (a
:class:`SpecError` whose diagnostics are all located; exit 2) or ``any`` (either, as long as it is
clean). Every case goes through the one oracle for invalid specs, ``tests.conftest.check_oracle``:
the library's check stages and ``coda check`` in-process (text and JSON) must agree, every
diagnostic is located, no output holds a Python traceback, and the exit code is 0, 1 or 2. A few
cases also run as a real subprocess (marked ``slow``).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from coda_spec.check.source import MAX_BYTES, MAX_DEPTH, load_source
from coda_spec.errors import SpecError, ToolError
from tests.conftest import ROOT, check_oracle, coda_check

SPEC = ROOT / "specs" / "rmsnorm_chain.yaml"
GOOD = SPEC.read_bytes()


def _replace_line(prefix: bytes, new: bytes) -> bytes:
    """GOOD with its first line starting with ``prefix`` replaced by ``new`` (no newline)."""
    lines = GOOD.split(b"\n")
    i = next(i for i, ln in enumerate(lines) if ln.startswith(prefix))
    return b"\n".join(lines[:i] + [new] + lines[i + 1 :])


def _line_of(data: bytes, needle: bytes) -> int:
    return data[: data.index(needle)].count(b"\n") + 1


BILLION_LAUGHS = b"""\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""

_rng = random.Random(20261129)
GARBAGE = bytes(_rng.randrange(256) for _ in range(8192)) + b"\x00\x00" + b"\xff" * 16
DUP_NAME = GOOD.replace(b"dims:", b"name: other_name\ndims:", 1)
DEEP_BLOCK = b"".join(b"  " * i + b"a:\n" for i in range(400)) + b"  " * 400 + b"1\n"

# name -> (file bytes, expected outcome, substring of the first error message or None)
CASES = {
    "non_yaml_text": (b"this is : not: yaml: [unclosed\n  } ::\n", "invalid", "YAML"),
    "prose": (b"Hello, this is a README, not a spec.\n", "invalid", "mapping at top level"),
    "python_source": (b"def f(x):\n    return {x: [x]}\n", "invalid", None),
    "empty_file": (b"", "invalid", "empty spec"),
    "whitespace_only": (b"   \n\n      \n", "invalid", "empty spec"),
    "whitespace_with_tabs": (b" \t \n\t\n", "invalid", None),
    "comment_only": (b"# nothing here\n", "invalid", "empty spec"),
    "lone_scalar": (b"42\n", "invalid", "mapping at top level"),
    "lone_string": (b"rmsnorm_chain\n", "invalid", "mapping at top level"),
    "lone_null": (b"~\n", "invalid", "empty spec"),
    "top_level_list": (b"- coda: 1\n- name: x\n", "invalid", "mapping at top level"),
    "binary_garbage": (GARBAGE, "invalid", None),
    "nul_bytes": (GOOD.replace(b"doc: >", b"doc: \x00>", 1), "invalid", "NUL"),
    "invalid_utf8": (
        GOOD.replace(b"residual stream", b"residual \xff\xfe stream"),
        "invalid",
        "UTF-8",
    ),
    "latin1_text": (
        GOOD.replace(b"residual stream", "résidu".encode("latin-1")),
        "invalid",
        "UTF-8",
    ),
    "utf16_file": (GOOD.decode().encode("utf-16"), "invalid", "UTF-8"),
    "utf8_bom": (b"\xef\xbb\xbf" + GOOD, "valid", None),
    "control_character": (GOOD.replace(b"residual stream", b"residual \x1b[31m"), "invalid", None),
    "deep_brackets": (b"[" * 10_000 + b"]" * 10_000, "invalid", f"deeper than {MAX_DEPTH}"),
    "deep_brackets_unclosed": (b"[" * 10_000, "invalid", None),
    "deep_mappings": (b"{a: " * 10_000 + b"1" + b"}" * 10_000, "invalid", "deeper than"),
    "deep_block_mappings": (DEEP_BLOCK, "invalid", "deeper than"),
    "deep_block_sequences": (b"- " * 10_000 + b"x\n", "invalid", "deeper than"),
    "billion_laughs": (BILLION_LAUGHS, "invalid", "anchor"),
    "anchor": (GOOD.replace(b"dims: {", b"dims: &d {", 1), "invalid", "anchor"),
    "alias_undefined": (GOOD.replace(b"dtype: bf16}", b"dtype: *nope}", 1), "invalid", "alias"),
    "merge_key": (
        GOOD.replace(b"  w_up:  {shape: [F, D], dtype: bf16}", b"  w_up:  {<<: {shape: [F, D]}}"),
        "invalid",
        "merge key",
    ),
    "duplicate_key": (DUP_NAME, "invalid", "duplicate key 'name'"),
    "duplicate_nested_key": (
        GOOD.replace(b"{shape: [D], dtype: bf16}", b"{shape: [D], dtype: bf16, shape: [D]}"),
        "invalid",
        "duplicate key 'shape'",
    ),
    "huge_file": (GOOD + b"# " + b"x" * MAX_BYTES + b"\n", "invalid", "larger than"),
    "two_documents": (GOOD + b"---\n" + GOOD, "invalid", "one YAML document"),
    "empty_second_document": (GOOD + b"---\n", "invalid", "one YAML document"),
    "explicit_single_document": (b"---\n" + GOOD + b"...\n", "valid", None),
    "python_object_tag": (
        b"!!python/object/apply:os.system ['echo pwned']\n",
        "invalid",
        "YAML tag",
    ),
    "python_tag_in_spec": (
        GOOD.replace(b"shape: [M, D]", b"shape: !!python/tuple [M, D]", 1),
        "invalid",
        "YAML tag",
    ),
    "custom_tag": (
        GOOD.replace(b"name: rmsnorm_chain", b"name: !foo rmsnorm_chain"),
        "invalid",
        "tag",
    ),
    "tag_directive": (b"%TAG !e! tag:example.com,2000:\n---\n" + GOOD, "any", None),
    "yaml_directive": (b"%YAML 1.1\n---\n" + GOOD, "valid", None),
    "long_doc_line": (
        GOOD.replace(b"doc: residual stream", b"doc: residual " + b"stream " * 100_000),
        "valid",
        None,
    ),
    "long_unknown_key": (GOOD + b"k" * 1000 + b": 1\n", "invalid", "unknown key"),
    "overlong_simple_key": (GOOD + b"k" * 300_000 + b": 1\n", "invalid", "YAML syntax error"),
    "long_name": (_replace_line(b"name:", b"name: " + b"n" * 300_000), "any", None),
    "long_bad_name": (_replace_line(b"name:", b"name: " + b"-" * 300_000), "invalid", None),
    "empty_block_scalar_at_eof": (
        GOOD[: GOOD.index(b"equivalent_to: |")] + b"equivalent_to: |\n",
        "invalid",
        "empty program",
    ),
    "crlf_line_endings": (GOOD.replace(b"\n", b"\r\n"), "valid", None),
    "cr_line_endings": (GOOD.replace(b"\n", b"\r"), "valid", None),
    "mixed_line_endings": (GOOD.replace(b"\n", b"\r\n", 10), "valid", None),
    "no_final_newline": (GOOD.rstrip(b"\n"), "valid", None),
    "tab_indentation": (GOOD.replace(b"\n  - kernel", b"\n\t- kernel"), "invalid", "tab"),
    "tabs_only_indent": (b"coda: 1\nsteps:\n\t- a\n", "invalid", "tab"),
    "huge_integer": (GOOD.replace(b"D: 4096", b"D: 4096" + b"0" * 5000, 1), "invalid", None),
    "huge_float": (GOOD.replace(b"eps: 1.0e-6", b"eps: 1.0e+999999"), "any", None),
    "nan_eps": (GOOD.replace(b"eps: 1.0e-6", b"eps: .nan"), "any", None),
    "non_string_keys": (
        GOOD.replace(b"dims: {", b"dims: {1: 2, null: 3, true: 4, ", 1),
        "invalid",
        None,
    ),
    "complex_key": (GOOD + b"? [a, b]\n: 1\n", "invalid", "mapping keys"),
    "timestamp_value": (GOOD.replace(b"name: rmsnorm_chain", b"name: 2001-12-14"), "invalid", None),
    "binary_value": (
        GOOD.replace(b"name: rmsnorm_chain", b"name: !!binary aGVsbG8="),
        "invalid",
        None,
    ),
    "escaped_surrogate": (
        GOOD.replace(b"name: rmsnorm_chain", b'name: "\\ud800"'),
        "invalid",
        None,
    ),
    "escaped_nul": (GOOD.replace(b"name: rmsnorm_chain", b'name: "a\\0b"'), "invalid", None),
    "unicode_line_separators": (
        GOOD.replace(b"residual stream", "residual\u2028stream\u0085x".encode()),
        "any",
        None,
    ),
    "unicode_name": (
        GOOD.replace(b"name: rmsnorm_chain", "name: ñame_✓".encode()),
        "invalid",
        None,
    ),
    "equivalent_to_deep": (
        GOOD.replace(b"  x1 = x + y @ w_o.T", b"  x1 = x + " + b"-" * 100_000 + b"y @ w_o.T"),
        "invalid",
        None,
    ),
    "equivalent_to_long_sum": (
        GOOD.replace(b"  x1 = x + y @ w_o.T", b"  x1 = x" + b" + x" * 50_000 + b" + y @ w_o.T"),
        "invalid",
        None,
    ),
    "dim_expression_deep": (
        GOOD.replace(b"shape: [M, D]", b"shape: [M, '" + b"1*" * 20_000 + b"D']", 1),
        "invalid",
        None,
    ),
    "dim_expression_parens": (
        GOOD.replace(b"shape: [M, D]", b"shape: [M, '" + b"(" * 500 + b"D" + b")" * 500 + b"']", 1),
        "invalid",
        None,
    ),
    "dim_expression_nul": (
        GOOD.replace(b"shape: [M, D]", b'shape: [M, "D\\0"]', 1),
        "invalid",
        None,
    ),
    "derive_garbage": (
        GOOD.replace(b"dtype: bf16, doc: residual stream}", b"dtype: bf16, derive: '):('}"),
        "invalid",
        None,
    ),
}

GROUPED = b"""\
coda: 1
name: grouped
dims: {M: dynamic, D: 4096, head_dim: HEAD}
tensors:
  h: {shape: [M, D], dtype: bf16}
  w: {shape: [D, D], dtype: bf16}
steps:
  - kernel: k
    gemm: {a: h, b: w.T}
    epilogue:
      - {store: acc, to: y}
      - {reduce_row: sumsq, of: acc, group: GROUP, as: ss}
      - {prepass: meansq, of: acc, group: GROUP, as: ms}
  - {finalize: rsqrt_mean, of: ss, eps: 1.0e-6, as: rs}
outputs: {y: bf16, rs: fp32}
"""
for _id, _head, _group in [
    ("dynamic", b"dynamic", b"head_dim"),  # a dynamic group (crashed check.steps: int // str)
    ("dynamic_dim", b"128", b"M"),
    ("div_by_zero", b"128", b"'D/0'"),
    ("zero", b"128", b"'head_dim-128'"),
    ("deep", b"128", b"'" + b"2*" * 5000 + b"1'"),
    ("list", b"128", b"[head_dim]"),
    ("negative", b"128", b"-3"),
]:
    CASES[f"group_{_id}"] = (GROUPED.replace(b"HEAD", _head).replace(b"GROUP", _group), "any", None)

EXIT = {"valid": {0}, "invalid": {2}, "any": {0, 2}}


def _cli(args) -> tuple[int, str]:
    run = coda_check(*args)
    return run.exit_code, run.output


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_file(name):
    data, expected, needle = CASES[name]
    assert data != GOOD, "the edit did not apply: has specs/rmsnorm_chain.yaml changed?"
    verdict = check_oracle(data=data, name=f"{name}.yaml")
    outcome = "valid" if verdict.valid else "invalid"
    if expected != "any":
        assert outcome == expected, verdict.error and [d.message[:200] for d in verdict.diagnostics]
    if needle is not None:
        assert verdict.error is not None and needle in verdict.diagnostics[0].message, verdict
    assert verdict.text.exit_code in EXIT[expected], verdict.text.output[-2000:]


def test_duplicate_key_names_both_places(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_bytes(DUP_NAME)
    with pytest.raises(SpecError) as info:
        load_source(path)
    (d,) = info.value.diagnostics
    first, second = _line_of(DUP_NAME, b"name: rmsnorm_chain"), _line_of(DUP_NAME, b"name: other")
    assert (d.line, d.col) == (second, 1)
    assert f"line {first}" in d.hint
    code, out = _cli([path])
    assert code == 2 and f"{path}:{second}:1:" in out and f"line {first}" in out


def test_invalid_utf8_is_located(tmp_path):
    data = CASES["invalid_utf8"][0]
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    with pytest.raises(SpecError) as info:
        load_source(path)
    (d,) = info.value.diagnostics
    assert d.line == _line_of(data, b"\xff") and d.col >= 1
    assert "0xff" in d.message


def test_huge_file_is_a_whole_file_error(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_bytes(CASES["huge_file"][0])
    with pytest.raises(SpecError) as info:
        load_source(path)
    (d,) = info.value.diagnostics
    assert (d.line, d.col) == (0, 0)
    assert str(MAX_BYTES) in d.message


def test_crlf_spec_matches_lf_spec(tmp_path):
    lf, crlf = tmp_path / "lf.yaml", tmp_path / "crlf.yaml"
    lf.write_bytes(GOOD)
    crlf.write_bytes(GOOD.replace(b"\n", b"\r\n"))
    a, b = load_source(lf), load_source(crlf)
    assert a.data == b.data
    assert a.marks == b.marks and a.key_marks == b.key_marks


def test_bom_spec_matches_plain_spec(tmp_path):
    plain, bom = tmp_path / "plain.yaml", tmp_path / "bom.yaml"
    plain.write_bytes(GOOD)
    bom.write_bytes(b"\xef\xbb\xbf" + GOOD)
    a, b = load_source(plain), load_source(bom)
    assert a.data == b.data and a.marks == b.marks


def test_directory_as_path_library(tmp_path):
    with pytest.raises(ToolError):
        load_source(tmp_path)


def test_directory_as_path_cli(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = _cli([empty])
    assert code == 2 and f"{empty}: error: no spec files" in out

    full = tmp_path / "full"
    (full / "nested.yaml").mkdir(parents=True)  # a directory that looks like a spec
    (full / "a.yaml").write_bytes(GOOD)
    code, out = _cli([full])
    assert code == 0, out
    assert "1 spec(s): 1 valid" in out

    code, out = _cli([full / "nested.yaml"])  # a directory named like a spec
    assert code == 2 and "no spec files" in out


def test_missing_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ToolError):
        load_source(missing)
    code, out = _cli([missing])
    assert code == 1, out
    assert "missing.yaml" in out and "cannot read" in out


def test_odd_paths(tmp_path):
    code, out = _cli(["nul\0in-path.yaml"])  # only the API or CliRunner can pass this
    assert code == 1 and "cannot read" in out
    with pytest.raises(ToolError):
        load_source("nul\0in-path.yaml")
    code, out = _cli([tmp_path / ("x" * 5000 + ".yaml")])
    assert code == 1 and "cannot read" in out

    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "a.yaml").write_bytes(GOOD)
    (tree / "sub" / "up").symlink_to("..")  # a symlink loop
    (tree / "self.yaml").symlink_to("self.yaml")
    (tree / "broken.yaml").symlink_to("nowhere.yaml")
    code, out = _cli([tree])
    assert code == 0, out
    code, out = _cli([tree / "broken.yaml"])
    assert code == 1 and "cannot read" in out
    code, out = _cli([tree / "self.yaml"])
    assert code == 1 and "cannot read" in out


def test_missing_file_beats_invalid_spec(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"42\n")
    code, out = _cli([bad, tmp_path / "missing.yaml", SPEC])
    assert code == 1, out
    assert "ok: " in out and "mapping at top level" in out


def test_unreadable_special_file():
    # /dev/zero never ends; the loader must stop at the size limit instead of reading forever.
    zero = Path("/dev/zero")
    if not zero.exists():
        pytest.skip("no /dev/zero")
    verdict = check_oracle(zero)
    assert verdict.stage == "load" and "larger than" in verdict.diagnostics[0].message


def test_all_cases_in_one_cli_run(tmp_path):
    paths = []
    for name, (data, _, _) in CASES.items():
        paths.append(tmp_path / f"{name}.yaml")
        paths[-1].write_bytes(data)
    code, out = _cli([*paths])
    assert code == 2, out[-2000:]
    code, out = _cli([tmp_path])
    assert code == 2, out[-2000:]


def _run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "coda_spec.cli", "check", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def _assert_no_crash(proc: subprocess.CompletedProcess) -> None:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "internal error" not in out, out[-3000:]
    assert proc.returncode in (0, 1, 2), proc.returncode


@pytest.mark.slow
def test_subprocess_hostile_files(tmp_path):
    names = [
        "binary_garbage",
        "deep_brackets",
        "billion_laughs",
        "huge_file",
        "python_object_tag",
        "equivalent_to_deep",
        "dim_expression_deep",
        "invalid_utf8",
    ]
    paths = []
    for name in names:
        paths.append(tmp_path / f"{name}.yaml")
        paths[-1].write_bytes(CASES[name][0])

    proc = _run_cli(*paths)
    assert proc.returncode == 2, proc.stderr[-2000:]
    _assert_no_crash(proc)
    assert f"{len(names)} spec(s): 0 valid, {len(names)} invalid" in proc.stderr

    proc = _run_cli(*paths, tmp_path / "missing.yaml")
    assert proc.returncode == 1
    _assert_no_crash(proc)

    proc = _run_cli(SPEC, tmp_path)  # tmp_path also holds the hostile files
    assert proc.returncode == 2
    _assert_no_crash(proc)

    crlf = tmp_path / "ok" / "crlf.yaml"
    crlf.parent.mkdir()
    crlf.write_bytes(GOOD.replace(b"\n", b"\r\n"))
    proc = _run_cli(crlf, "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _assert_no_crash(proc)
    assert isinstance(json.loads(proc.stdout), list)


def test_subprocess_bad_arguments():
    for args in (["check"], ["check", "--format", "xml", "x.yaml"], ["nonsense"]):
        proc = subprocess.run(
            [sys.executable, "-m", "coda_spec.cli", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert proc.returncode in (1, 2), (args, proc.returncode)
        _assert_no_crash(proc)


@pytest.mark.slow
def test_check_imports_no_gpu_stack():
    """``coda check`` stays light: neither torch nor quack nor cutlass gets imported."""
    code = (
        "import sys; from coda_spec.check.frontend import check_file; "
        "check_file('specs/rmsnorm_chain.yaml'); "
        "assert 'torch' not in sys.modules and 'quack' not in sys.modules "
        "and 'cutlass' not in sys.modules, sorted(sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]

    code = (
        "import sys; from coda_spec.cli import main\n"
        "try:\n    main(['check', '-q', 'specs'], standalone_mode=False)\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "bad = [m for m in ('torch', 'quack', 'cutlass') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout[-1000:] + proc.stderr[-2000:]
