"""The one rule for the Python identifiers generated code gives spec names.

Three writers of generated text name things after the spec: the GEMM epilogue lowering
(``coda_spec.primitives.lower_api.LowerCtx.ident``), the host-step lowering
(``coda_spec.primitives.host_api.HostCtx.ident``) and the finalize kernels (their entry points,
``coda_spec.lower.finalize_kernel``). Each calls :func:`ident` with what its own module defines.

The rule: characters outside ``[A-Za-z0-9_]`` (Unicode word characters stay) become ``_`` and a
name that does not start with a letter or ``_`` gets a ``_`` in front; then a ``_`` is appended
where the name would shadow a name the generated module defines (``reserved``), be a Python
keyword, or start with a prefix the module keeps for itself (``private``: ``_q``, the names of
QuACK's own the epilogue lowering uses). A spec name already matches the schema's identifier
pattern, so the first step leaves it unchanged; the generated names of every bundled spec are
those of the three separate rules this one replaced (``tests/test_shipped_tune_table.py``: the
build hashes did not move).

A leaf: imports nothing of coda's, so both lowering APIs (siblings that may not import each
other) and the finalize kernels can call it.
"""

from __future__ import annotations

import keyword
import re


def ident(name: str, reserved=frozenset(), private: str = "") -> str:
    """``name`` as an identifier of a generated module that defines ``reserved`` and keeps the
    names starting with ``private`` (when given) to itself."""
    out = re.sub(r"\W", "_", name)
    if not (out[:1].isalpha() or out[:1] == "_"):
        out = "_" + out
    if out in reserved or keyword.iskeyword(out) or (private and out.startswith(private)):
        return out + "_"
    return out
