"""The primitive registry: one module per primitive, discovered, never listed.

Contract
--------
Every module of this package whose name does not start with ``_`` and is not ``base`` or one of
the two lowering contracts a primitive lowers against (``lower_api``: the CuTe epilogue's;
``host_api``: a host step's Triton kernel's) is a primitive file: it exports ``PRIMITIVE`` (a
:class:`~coda_spec.primitives.base.Primitive`) whose ``name`` is the module's own name. Adding a
primitive is adding one file; nothing here, in the validator or in the schema changes (a test
checks the file/name rule). ``_``-prefixed modules
hold shared builders and text (``_elementwise``, ``_pairs``, ``_reduce``, ...).

``registry()`` returns a fresh, read-only name -> Primitive mapping in sorted name order, so every
consumer (schema, docs, ``coda primitives``) sees the same deterministic order. Discovery only
lists this package's directory (``pkgutil``) and imports the modules it finds: no decorators, no
import-time registration, no module-level mutable state (Python's module cache makes repeated
calls cheap). The listing is read once per process (``functools.cache`` on
:func:`primitive_modules`, an immutable tuple): the reference interpreter asks for the registry
at every step, and rescanning the directory each time was a fifth of a mutation test's time.

``cache_keys(spec)`` is the part of a build's content address that primitives own: the
``cache_key()`` of every primitive the spec uses, so bumping one primitive's ``version`` rebuilds
exactly the specs that use it (``coda_spec.build.build_hash``).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path
from types import MappingProxyType

NOT_PRIMITIVES = ("base", "lower_api", "host_api")  # modules here that are not primitive files


@functools.cache
def primitive_modules() -> tuple[str, ...]:
    """Names of the primitive files of this package, sorted (listed once per process)."""
    here = [str(Path(__file__).resolve().parent)]
    names = (m.name for m in pkgutil.iter_modules(here) if not m.ispkg)
    return tuple(sorted(n for n in names if not n.startswith("_") and n not in NOT_PRIMITIVES))


def registry() -> MappingProxyType:
    """Read-only name -> Primitive map, in sorted name order."""
    out = {}
    for module in primitive_modules():
        prim = getattr(importlib.import_module(f"{__name__}.{module}"), "PRIMITIVE", None)
        if prim is None:
            raise ImportError(
                f"coda_spec/primitives/{module}.py exports no PRIMITIVE; a primitive file "
                "declares one (shared helpers go in a module whose name starts with '_')"
            )
        if prim.name != module:
            raise ImportError(
                f"coda_spec/primitives/{module}.py declares primitive '{prim.name}'; a primitive "
                "file is named after its primitive (docs and the schema look it up by name)"
            )
        out[prim.name] = prim
    return MappingProxyType(out)


def cache_keys(spec) -> list:
    """``cache_key()`` of every primitive that ``spec`` (a normalized ``ir.Spec``) uses, sorted."""
    prims = registry()
    used = {op.prim for step in spec.all_steps() for op in step.ops}
    return sorted(list(prims[name].cache_key()) for name in used)


def item_primitives(item: dict, prims) -> list:
    """The primitive keys of an epilogue item. A key that names a primitive but is also a
    parameter of the item's other primitive is that parameter, not a second primitive
    (``{clamp: x, min: -1.0, max: 1.0}`` is one ``clamp``): of several primitive keys, those
    whose schema declares every other one win."""
    keys = [k for k in item if k in prims]
    if len(keys) > 1:
        owners = [k for k in keys if set(keys) - {k} <= set(prims[k].schema["properties"])]
        return owners or keys
    return keys
