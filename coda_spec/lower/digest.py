"""The coda code a build's kernels are compiled with, as digests for the build's address.

A generated ``kernel.py`` imports coda modules (``lower.quack_private``, ``lower.quack_ops``,
``lower.kernel_lib``), and the compile worker (``lower.quack_adapter``) runs them when it traces
and exports the kernels: their code is part of what a build's objects are, as much as the
generated text. :func:`compile_code` gives, for each such module, a digest of its code, which
``coda_spec.build.build_hash`` folds into the address, so a change to that code is a new build
and never a cache hit on objects compiled from the old code.

Which modules: those the generated source imports from ``coda_spec.lower``, the compile worker
and, for a build with host steps or finalizes, ``lower.triton_aot``, and the ``coda_spec.lower``
modules they import in turn (a package counts as its ``__init__``). Imports outside
``coda_spec.lower`` are not followed: the leaves they reach (dims, dtypes, errors) describe
shapes and messages, not kernel code. A digest covers the module's syntax tree without
docstrings, so comments, docstrings and formatting move nothing.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

ROOT = "coda_spec.lower"
PACKAGE = Path(__file__).resolve().parent.parent  # coda_spec/
WORKER = "coda_spec.lower.quack_adapter"  # the compile worker: traces and exports the epilogues
AOT = "coda_spec.lower.triton_aot"  # compiles host steps' and finalizes' Triton kernels


def _file(module: str) -> Path | None:
    """``module``'s source file under the package, found without importing anything (a package
    such as ``lower.quack_ops`` imports cutlass and quack, and a cache hit must not)."""
    parts = module.split(".")[1:]
    base = PACKAGE.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(text: str) -> set[str]:
    """The coda modules ``text`` imports, at any depth of it: ``from a.b import c`` is ``a.b.c``
    where that is a module, else ``a.b``."""
    out = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("coda_spec")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("coda_spec"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if _file(sub) is not None else node.module)
    return out


def _digest(path: Path) -> str:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


def compile_code(source: str, aot=()) -> dict[str, str]:
    """{module: digest} of the coda code that compiles ``source`` (a ``kernel.py``) and ``aot``
    (the Triton kernels' sources, compiled through ``lower.triton_aot`` when there are any)."""
    sources = (source, *aot)
    todo = {WORKER} | ({AOT} if aot else set())
    todo |= {m for s in sources for m in _imports(s) if m.startswith(ROOT)}
    seen: dict[str, str] = {}
    while todo:
        module = todo.pop()
        path = _file(module)
        if module in seen or path is None:
            continue
        seen[module] = _digest(path)
        todo |= {m for m in _imports(path.read_text()) if m.startswith(ROOT) and m not in seen}
    return dict(sorted(seen.items()))
