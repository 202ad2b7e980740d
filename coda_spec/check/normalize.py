"""Stage ``normalize``: schema-valid data -> frozen IR (``coda_spec.ir``).

Defaults are made explicit here so later stages never guess: a load's result name defaults to its
tensor, a store's target to its value's name. Nothing is checked here beyond what the schema
already guaranteed; semantic checks live in ``analyze``.
"""

from __future__ import annotations

import hashlib
import json

from coda_spec.check.source import Source
from coda_spec.finalize import SECONDS as FINALIZE_SECONDS
from coda_spec.ir import (
    Backward,
    Dim,
    Finalize,
    Gemm,
    Host,
    Kernel,
    Loc,
    Op,
    Operand,
    Output,
    Spec,
    Tensor,
)
from coda_spec.primitives import item_primitives, registry


def _loc(src: Source, path: tuple) -> Loc:
    line, col = src.where(path)
    return Loc(line, col, path)


def _op(src: Source, path: tuple, item: dict, prims) -> Op:
    [prim] = item_primitives(item, prims)
    p = prims[prim]
    args = [(prim, item[prim])]
    args += [(k, v) for k, v in item.items() if k not in (prim, "as", "doc")]
    if "as" in item:
        results = tuple(item["as"]) if isinstance(item["as"], list) else (item["as"],)
    elif p.results == "none":
        results = ()
        if "to" not in item:
            args.append(("to", item[prim]))
    else:  # loads: the value is named after its tensor
        results = (item[prim],)
    return Op(prim=prim, args=tuple(args), results=results, loc=_loc(src, path))


def _operand(text: str) -> Operand:
    if text.endswith(".T"):
        return Operand(text[:-2], True)
    return Operand(text, False)


def _steps(src: Source, base: tuple, steps: list, prims) -> tuple:
    out = []
    for i, s in enumerate(steps):
        path = base + (i,)
        if "kernel" in s:
            ops = tuple(
                _op(src, path + ("epilogue", j), it, prims) for j, it in enumerate(s["epilogue"])
            )
            g = s["gemm"]
            gemm = Gemm(_operand(g["a"]), _operand(g["b"]), _loc(src, path + ("gemm",)))
            out.append(Kernel(s["kernel"], gemm, ops, s.get("doc", ""), _loc(src, path)))
        elif "host" in s:
            ops = tuple(_op(src, path + ("body", j), it, prims) for j, it in enumerate(s["body"]))
            out.append(Host(s["host"], s["over"], ops, s.get("doc", ""), _loc(src, path)))
        else:
            second = next((s[k] for k in FINALIZE_SECONDS if k in s), None)
            out.append(
                Finalize(
                    s["finalize"],
                    s["of"],
                    s["as"],
                    s.get("n"),
                    s.get("eps"),
                    _loc(src, path),
                    over=s.get("over"),
                    second=second,
                )
            )
    return tuple(out)


def _outputs(src: Source, base: tuple, outputs: dict) -> tuple:
    return tuple(
        Output(n, dt, _loc(src, base + (n,)))
        if isinstance(dt, str)
        else Output(n, dt["dtype"], _loc(src, base + (n,)), dt.get("differentiable", True))
        for n, dt in outputs.items()
    )


def digest_of(data) -> str:
    """Content hash of the spec's data (not its formatting or comments)."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def normalize(src: Source) -> Spec:
    d = src.data
    prims = registry()
    dims = tuple(
        Dim(n, None if v == "dynamic" else v, _loc(src, ("dims", n)))
        for n, v in d.get("dims", {}).items()
    )
    tensors = tuple(
        Tensor(
            n,
            tuple(t["shape"]),
            t["dtype"],
            tuple(t["range"]) if "range" in t else None,
            t.get("ignore_index"),
            t.get("derive"),
            t.get("doc", ""),
            _loc(src, ("tensors", n)),
            t.get("differentiable", True),
        )
        for n, t in d["tensors"].items()
    )
    bw = d.get("backward")
    backward = None
    if bw is not None:
        backward = Backward(
            save=tuple(bw.get("save", ())),
            grads=tuple(bw["grads"].items()),
            steps=_steps(src, ("backward", "steps"), bw["steps"], prims),
            outputs=_outputs(src, ("backward", "outputs"), bw["outputs"]),
            loc=_loc(src, ("backward",)),
            recomputes=tuple(bw.get("recomputes", {}).items()),
        )
    eq = d.get("equivalent_to")
    return Spec(
        coda=d["coda"],
        name=d["name"],
        doc=d.get("doc", ""),
        dims=dims,
        tensors=tensors,
        steps=_steps(src, ("steps",), d["steps"], prims),
        outputs=_outputs(src, ("outputs",), d["outputs"]),
        equivalent_to=eq,
        equivalent_loc=_loc(src, ("equivalent_to",)) if eq else None,
        backward=backward,
        file=src.file,
        digest=digest_of(d),
        configs=tuple(d.get("configs", ())),
    )
