"""The docs cannot drift: generated sections are current and the full example checks clean."""

from __future__ import annotations

import re

import pytest

from coda_spec.check.frontend import check_source
from coda_spec.check.source import parse_text
from coda_spec.docgen import DOC, updated
from tests.conftest import ROOT


def test_primitive_reference_is_current():
    assert DOC.read_text() == updated(DOC.read_text()), "run: python -m coda_spec.docgen"


def _yaml_blocks(path):
    return re.findall(r"```yaml\n(.*?)```", path.read_text(), flags=re.S)


DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# The line before a YAML block that is not a whole spec says what it is; nothing is skipped
# silently. fragment: part of a spec (skipped); not-a-spec: other YAML (CI configs: skipped);
# invalid: a whole spec shown with a mistake (must FAIL coda check).
YAML_MARKS = ("<!-- yaml: fragment -->", "<!-- yaml: not-a-spec -->", "<!-- yaml: invalid -->")


def yaml_blocks(path) -> list[tuple[int, str, str]]:
    """(line, marker or "", text) of every ```yaml block of ``path``."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```yaml":
            indent = len(lines[i]) - len(lines[i].lstrip())
            j = i + 1
            while lines[j].strip() != "```":
                j += 1
            mark = lines[i - 1].strip() if i and lines[i - 1].strip() in YAML_MARKS else ""
            text = "\n".join(line[indent:] for line in lines[i + 1 : j]) + "\n"
            out.append((i + 2, mark, text))
            i = j
        i += 1
    return out


def test_every_yaml_block_is_a_spec_that_checks_or_is_marked():
    """Every YAML block of docs/*.md and README.md is a whole spec that ``coda check``
    accepts, or is marked (YAML_MARKS) on the line before; an ``invalid`` one must fail."""
    from coda_spec.errors import SpecError

    seen, problems = 0, []
    for path in DOCS:
        for line, mark, text in yaml_blocks(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if mark in YAML_MARKS[:2]:
                continue
            seen += 1
            try:
                check_source(parse_text(where, text))
                ok = True
            except SpecError as e:
                ok, why = False, e.diagnostics[0]
            if mark and ok:
                problems.append(f"{where}: marked invalid, but coda check accepts it")
            elif not mark and not ok:
                problems.append(f"{where}: {why.message} (mark it if it is not a whole spec)")
    assert not problems, "\n".join(problems)
    assert seen >= 4  # spec-language's example, its fp8 example, README's, the tutorial's v1


def test_complete_example_in_the_language_reference_checks_clean():
    first = _yaml_blocks(DOC)[0]
    checked = check_source(parse_text("docs/spec-language.md", first))
    assert checked.spec.name == "rmsnorm_chain"


def test_readme_example_checks_clean():
    blocks = [b for b in _yaml_blocks(ROOT / "README.md") if b.startswith("coda: 1")]
    assert blocks, "README shows no complete spec"
    for b in blocks:
        check_source(parse_text("README.md", b))


def test_build_docs_show_f2s_generated_file_as_generated():
    """docs/build.md quotes f2's whole generated kernel.py: it must be the golden file, so the
    docs show real output (the golden test ties that file to the lowering)."""
    text = (ROOT / "docs" / "build.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    golden = (ROOT / "tests" / "golden" / "kernels" / "f2_deferred_norm.py").read_text()
    assert golden in blocks


def test_architecture_docs_quote_softcap_as_it_is():
    """docs/architecture.md shows softcap's whole definition as the one-file example."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    source = (ROOT / "coda_spec" / "primitives" / "softcap.py").read_text()
    quoted = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert any(block.strip() in source for block in quoted)
    assert "PRIMITIVE = composite(" in quoted[0]


def test_the_training_example_trains_on_the_cpu(tmp_path, monkeypatch):
    """docs/training.md's step, as written, on a small CPU build of llama_block (the op's CPU
    implementation): three steps, a finite loss, every weight moved by AdamW."""
    import torch

    from coda_spec import ops
    from tests import test_runtime_cpu as rt

    monkeypatch.setattr(ops, "_OPS", {})
    spec = ROOT / "specs" / "llama_block.yaml"
    monkeypatch.setitem(rt.SPECS, "llama_doc", (spec, {"D": 128, "F": 128}))
    build, _ = rt.make_build(tmp_path, "llama_doc")
    text = (ROOT / "docs" / "training.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert '"build/llama_block-latest"' in code and "M, D, F = 2048," in code
    code = code.replace('"build/llama_block-latest"', repr(str(build)))
    code = code.replace("M, D, F = 2048,", "M, D, F = 8,")
    scope: dict = {}
    exec(compile(code, "docs/training.md", "exec"), scope)  # noqa: S102 - the docs' own code
    assert torch.isfinite(scope["loss"]).item()
    moved = [
        n for n, p in scope["params"].items() if not torch.equal(p, scope["init"][n].bfloat16())
    ]
    assert sorted(moved) == sorted(scope["shapes"])


def test_the_fuse_grad_accum_example_accumulates_on_the_cpu(tmp_path, monkeypatch):
    """docs/training.md's gradient-accumulation example after its training step, on the small
    CPU build: the first micro-batch sets .grad (functional), every later one adds the four
    weight gradients into it (zero_grad(set_to_none=False) keeps the buffers)."""
    import torch

    from coda_spec import ops
    from tests import test_runtime_cpu as rt
    from tests.test_grad_accum import spy_accumulated

    monkeypatch.setattr(ops, "_OPS", {})
    spec = ROOT / "specs" / "llama_block.yaml"
    monkeypatch.setitem(rt.SPECS, "llama_doc", (spec, {"D": 128, "F": 128}))
    build, _ = rt.make_build(tmp_path, "llama_doc")
    log = spy_accumulated(monkeypatch)
    text = (ROOT / "docs" / "training.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    first, second = blocks[0], next(b for b in blocks if "fuse_grad_accum=True" in b)
    scope: dict = {}
    for code in (first, second):
        code = code.replace('"build/llama_block-latest"', repr(str(build)))
        code = code.replace("M, D, F = 2048,", "M, D, F = 8,")
        exec(compile(code, "docs/training.md", "exec"), scope)  # noqa: S102 - the docs' code
    weights = sorted(["dw_qkv", "dw_down", "dw_gu", "dw_o"])
    assert log[3:] == [[]] + [weights] * 7  # after the first example's 3 steps
    assert all(torch.isfinite(p.grad.float()).all() for p in scope["weights"].values())


def test_the_llama_example_trains_on_the_cpu(tmp_path, monkeypatch):
    """docs/training.md's coda_spec.nn example, as written, at a tiny GQA config on the CPU
    (the chains' reference; CPU builds of the model's llama3 specs): three AdamW steps, a finite
    loss, and transformers takes the trained weights back."""
    import torch

    pytest.importorskip("transformers")
    from coda_spec import ops
    from coda_spec.nn.llama import CHAINS
    from tests.test_nn_llama import cpu_builds

    monkeypatch.setattr(ops, "_OPS", {})
    builds = cpu_builds(tmp_path, monkeypatch, CHAINS)
    text = (ROOT / "docs" / "training.md").read_text()
    code = [c for c in re.findall(r"```python\n(.*?)```", text, re.S) if "coda_spec.nn" in c][0]
    shape = re.search(r"^shape = dict\(.*?\)  # fmt: skip$", code, re.S | re.M).group(0)
    tiny = (
        "shape = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, "
        "num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=1024, "
        "rms_norm_eps=1e-5, tie_word_embeddings=True)"
    )
    assert '"build"' in code and "(2, 4096)" in code
    code = (
        code.replace(shape, tiny)
        .replace('"build"', repr({k: str(v) for k, v in builds.items()}))
        .replace("(2, 4096)", "(2, 16)")
    )
    scope: dict = {}
    exec(compile(code, "docs/training.md", "exec"), scope)  # noqa: S102 - the docs' own code
    assert torch.isfinite(scope["loss"]).item()
    sd = scope["hf"].state_dict()
    back = scope["model"].to_hf_state_dict()
    assert all(torch.equal(sd[k], back[k].to(sd[k].dtype)) for k in back)


@pytest.mark.slow
def test_the_trainer_example_trains_on_the_cpu(tmp_path, monkeypatch, capsys):
    """docs/training.md's ``Trainer`` example (``coda_spec.nn.apply_to_hf``), as written, on the
    CPU with CPU builds of the Llama chains: four training steps through coda's chains, each
    loss finite and below the first, then ``evaluate`` and ``generate`` through transformers'
    forward."""
    import torch

    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # the Trainer's; in the test extra
    from coda_spec import ops
    from coda_spec.nn.llama import CHAINS
    from tests.test_nn_llama import cpu_builds

    monkeypatch.setattr(ops, "_OPS", {})
    builds = cpu_builds(tmp_path, monkeypatch, CHAINS)
    text = (ROOT / "docs" / "training.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    (code,) = [c for c in blocks if "coda_spec.nn.apply_to_hf(model" in c]
    assert '"build"' in code and 'output_dir="out"' in code
    code = code.replace('"build"', repr({k: str(v) for k, v in builds.items()})).replace(
        'output_dir="out"', f"output_dir={str(tmp_path / 'out')!r}"
    )
    scope: dict = {}
    exec(compile(code, "docs/training.md", "exec"), scope)  # noqa: S102 - the docs' own code
    losses = [e["loss"] for e in scope["trainer"].state.log_history if "loss" in e]
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0], losses
    assert "eval_loss" in capsys.readouterr().out


# -- documented command lines parse against the real CLI -------------------------------------

# a command: coda ..., python -m coda_spec.cli ..., python benchmarks/x.py ..., torchrun ... x.py
COMMAND = re.compile(
    r"^(coda|python3? -m coda_spec\.cli|python3? (?:benchmarks|examples)/\S+\.py"
    r"|torchrun .*?(?:benchmarks|examples)/\S+\.py)(\s|$)"
)
SHELL_BLOCKS = ("bash", "sh", "shell", "console", "")  # ```text blocks are output, not commands


def doc_commands(path) -> list[tuple[int, str, str]]:
    """(line, kind, command) of every command line in ``path``: kind ``run`` (a line of a shell
    block, ``\\`` continuations joined, ``$ `` prompts dropped; a console block's other lines
    are output), ``synopsis`` (a shell-block line with ``[--option]`` parts, continued on the
    lines that start with ``[``) or ``mention`` (an inline code span: a command named with some
    of its flags, its arguments left out)."""
    text = path.read_text(encoding="utf-8")
    found = []
    fence = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^\1```", flags=re.S | re.M)
    for m in fence.finditer(text):
        if m.group(2) not in SHELL_BLOCKS:
            continue
        first = text[: m.start()].count("\n") + 2
        logical, start = "", None
        for k, raw in enumerate(m.group(3).split("\n")):
            line = raw.strip()
            if m.group(2) == "console" and not logical and not line.startswith("$ "):
                continue
            line = line.removeprefix("$ ")
            if line.startswith("[") and found and found[-1][1] == "synopsis":
                found[-1] = (found[-1][0], "synopsis", found[-1][2] + " " + line)
                continue
            start = first + k if start is None else start
            logical += line[:-1] + " " if line.endswith("\\") else line
            if not line.endswith("\\"):
                found.append((start, "synopsis" if " [" in logical else "run", logical))
                logical, start = "", None
    prose = fence.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for m in re.finditer(r"`([^`]+)`", prose):
        found.append((prose[: m.start()].count("\n") + 1, "mention", " ".join(m.group(1).split())))
    out = []
    for line, kind, cmd in found:
        words = cmd.split()
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # CODA_TUNED=x coda ...
            words.pop(0)
        cmd = " ".join(words)
        if COMMAND.match(cmd):
            out.append((line, kind, cmd))
    return out


def command_words(cmd: str) -> list[str]:
    """``cmd``'s words up to its first shell operator (a pipe, ``&&``, a redirection) or
    comment."""
    import shlex

    lex = shlex.shlex(cmd, posix=True, punctuation_chars="|&;<>")
    lex.whitespace_split, lex.commenters = True, "#"
    words = []
    for w in lex:
        if w[0] in "|&;<>" or re.match(r"^\d>", w):
            break
        words.append(w)
    return words


def _flags(words) -> list[str]:
    """The option names a synopsis shows: ``[-o/--builds build]`` gives -o and --builds."""
    return re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", " ".join(words))


def parse_coda(words: list[str], kind: str) -> str | None:
    """Parse ``coda WORDS`` with click, running nothing: None, or click's complaint."""
    import click

    from coda_spec.cli import main

    if not words or words[0].startswith("--help"):
        return None
    cmd = main.commands.get(words[0])
    if cmd is None:
        return f"no command '{words[0]}'"
    if kind == "synopsis":
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
        unknown = [f for f in _flags(words[1:]) if f not in known]
        return f"no option {', '.join(unknown)}" if unknown else None
    try:
        cmd.make_context(words[0], list(words[1:]), parent=click.Context(main, info_name="coda"))
    except click.exceptions.Exit:  # --help
        return None
    except click.MissingParameter as e:
        if kind == "mention" and isinstance(e.param, click.Argument):
            return None  # `coda verify --small` names a flag; its targets are elsewhere
        return e.format_message()
    except click.BadOptionUsage as e:
        if kind == "mention" and "requires an argument" in e.format_message():
            return None  # `coda bench --dims` names the flag alone
        return e.format_message()
    except click.ClickException as e:
        return e.format_message()
    return None


def test_every_documented_coda_command_parses(monkeypatch, capsys):
    """Every ``coda ...`` line of docs/*.md and README.md parses against the real CLI (click,
    nothing run): commands and options exist, values parse, required arguments are there
    (mentions in prose may leave those out); a synopsis names real options only."""
    from coda_spec.cli import main

    monkeypatch.chdir(ROOT)  # -o's check reads the folder a documented path names
    problems, seen = [], 0
    for path in DOCS:
        for line, kind, cmd in doc_commands(path):
            words = command_words(cmd)
            if words[0] != "coda":
                continue
            if kind == "mention" and len(words) > 1 and not words[1].startswith("-"):
                if words[1] not in main.commands:
                    continue  # prose in a code span ("coda against fp32: ..."), not a command
            seen += 1
            why = parse_coda(words[1:], kind)
            if why:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {cmd}\n    {why}")
    capsys.readouterr()
    assert not problems, "\n".join(problems)
    assert seen > 100


class _Parsed(Exception):
    """Raised by the patched ``parse_args`` once a script's arguments parsed."""


def parse_script(script, args, monkeypatch) -> str | None:
    """Run ``script`` as ``__main__`` up to its ``parse_args`` (patched to stop there):
    None when argparse accepts ``args``, else argparse's complaint."""
    import argparse
    import contextlib
    import io
    import runpy
    import sys

    real = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))

    err = io.StringIO()
    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", parse_args)
        m.setattr(sys, "argv", [str(script), *args])
        m.syspath_prepend(str(script.parent))
        try:
            with contextlib.redirect_stderr(err):
                runpy.run_path(str(script), run_name="__main__")
        except _Parsed:
            return None
        except SystemExit:
            return err.getvalue().strip().splitlines()[-1]
    return "ran to the end without parsing its arguments"


def test_every_documented_script_command_parses(monkeypatch):
    """Every documented ``python benchmarks/...``/``examples/...`` line (and ``torchrun``) names
    a script that exists, and argparse accepts its flags (the script is run only up to its
    ``parse_args``). A script without argparse takes paths only: its lines must show no flag."""
    problems, seen = [], set()
    for path in DOCS:
        for line, _, cmd in doc_commands(path):
            words = command_words(cmd)
            at = next((i for i, w in enumerate(words) if w.endswith(".py")), None)
            if at is None or words[0] == "coda":
                continue
            script, args = ROOT / words[at], words[at + 1 :]
            where = f"{path.relative_to(ROOT)}:{line}: {cmd}"
            if not script.exists():
                problems.append(f"{where}\n    no such script")
                continue
            seen.add(script.name)
            if "argparse" not in script.read_text(encoding="utf-8"):
                if any(a.startswith("-") for a in args):
                    problems.append(f"{where}\n    the script parses no flags")
                continue
            why = parse_script(script, args, monkeypatch)
            if why:
                problems.append(f"{where}\n    {why}")
    assert not problems, "\n".join(problems)
    assert {"train_step.py", "llama_h200.py", "example_grads.py", "train_llama.py"} <= seen


def test_the_architecture_map_is_the_import_contract():
    """docs/architecture.md's layer list is import-linter's layers contract (pyproject.toml),
    line for line: the same modules, the same order, the same siblings on one line."""
    import tomllib

    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("Imports point down this list", 1)[1].split("```", 2)[1]
    drop = "coda_spec."

    def names(line: str) -> frozenset:
        return frozenset(n.strip().removeprefix(drop) for n in line.split("|"))

    doc = [names(re.split(r"\s{2,}", ln.strip())[0]) for ln in block.splitlines() if ln.strip()]
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    layers = next(c for c in data["tool"]["importlinter"]["contracts"] if c["type"] == "layers")[
        "layers"
    ]
    assert doc == [names(layer) for layer in layers]


def _sccs(edges: dict) -> list:
    """The strongly connected components of more than one node of ``{node: {node, ...}}``
    (Tarjan's, iterative): each is a set of units that reach one another, a cycle."""
    index, low, stack, on, found, n = {}, {}, [], set(), [], 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = n
        n += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(edges[w])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(comp)
    return found


def import_graph_figures() -> dict:
    """The import graph's figures, from the code: flat modules, packages, cycles (grimp's graph
    of every import statement, function-level ones included) and the largest class (ast)."""
    import ast

    import grimp

    pkg = ROOT / "coda_spec"
    graph = grimp.build_graph("coda_spec", cache_dir=None)
    modules = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    modules = {m: {i for i in imported if i in modules} for m, imported in modules.items()}

    def top(m: str) -> str:
        return ".".join(m.split(".")[:2])

    units: dict = {}
    for m, imported in modules.items():
        units.setdefault(top(m), set()).update(top(i) for i in imported if top(i) != top(m))
    classes = [
        (node.end_lineno - node.lineno + 1, f"{path.relative_to(pkg)} {node.name}")
        for path in sorted(pkg.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    ]
    lines, name = max(classes)
    return {
        "flat modules in coda_spec/ (without __init__)": (
            len([p for p in pkg.glob("*.py") if p.stem != "__init__"]),
            "",
        ),
        "packages in coda_spec/": (len([p for p in pkg.glob("*/__init__.py")]), ""),
        "cycles between coda_spec.<top> units": (len(_sccs(units)), ""),
        "cycles between modules": (len(_sccs(modules)), ""),
        "largest class, lines": (lines, name),
    }


def test_the_import_graph_figures_are_current():
    """docs/architecture.md's "Import graph" figures equal the ones computed from the code; its
    package map names the packages and the flat modules there are. "Arrows pointing back up"
    is lint-imports' (tests/test_lower_api.py::test_import_contract_holds): it stays 0."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## Import graph", 1)[1].split("```", 2)[1]
    doc = {}
    for line in block.strip().splitlines():
        label, number, *note = re.split(r"\s{2,}", line.strip())
        doc[label] = (int(number), note[0] if note else "")
    assert doc.pop("arrows pointing back up")[0] == 0
    assert _sccs({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]  # counts
    figures = import_graph_figures()
    assert {k: v[0] for k, v in doc.items()} == {k: v[0] for k, v in figures.items()}
    largest = figures["largest class, lines"][1]
    assert doc["largest class, lines"][1] == largest, largest
    pkg = ROOT / "coda_spec"
    layout = text.split("## Layers", 1)[1].split("```", 2)[1]
    named = set(re.findall(r"^coda_spec/(\w+)/|\s{2}coda_spec/(\w+)/", layout, flags=re.M))
    assert {a or b for a, b in named} == {p.parent.name for p in pkg.glob("*/__init__.py")}
    flat = re.sub(r"\([^)]*\)", "", layout.split("\nflat", 1)[1])  # "__init__ (load, op)"
    listed = {w.strip() for w in flat.split(",")}
    assert listed == {p.stem for p in pkg.glob("*.py")}
