"""Build side of the artifact: the writer of ``manifest.json`` (stage ``manifest`` of a build).

``coda_spec.build`` calls :func:`make_manifest` with the checked spec, the lowering's call
description (``lowered.json``'s data), the compile records and the compiled host steps and
finalizes. The format itself (version, read, write, shape evaluation) is ``coda_spec.artifact``'s,
and it is all the runtime reads: this module may use the front end's results and the primitive
registry, and the deploy side imports nothing from here (import-linter's forbidden contract).

Contract (format ``artifact.FORMAT_VERSION``, documented in ``coda_spec.artifact``): every shape
the manifest records -- ``inputs``, ``outputs``, ``tensors``, ``grads_in``,
``backward_outputs``, each kernel step's ``fields``, ``d``/``c`` and GEMM ``m``/``n``/``k``,
every variant's ``fields``, a finalize's ``n``, the shapes of compiled launches -- is an
expression over the spec's dims (``"D"``, ``"2*F"``, ``"cdiv(D,256)"``; an int only for a
literal), so a reader re-sizes a build by replacing ``dims``. The analysis and the lowering
compute with :class:`coda_spec.dims.Sym` values (ints carrying their expression); the writer
turns every shape entry into its text (``coda_spec.artifact.with_exprs``; :func:`lowered_exprs`
for ``lowered.json``) as its last step, and any other Sym (a constant baked into a compiled
kernel, like a host kernel's lanes per program) into its plain int.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from coda_spec.artifact import FORMAT_VERSION, with_exprs
from coda_spec.config import config_text
from coda_spec.dims import exprs
from coda_spec.errors import ToolError
from coda_spec.finalize import default_n, partial_fold
from coda_spec.versions import tool_versions

# Where lowered.json holds shapes (the compile worker evaluates them at its sizes).
LOWERED_SHAPES = (
    ("tensors", "*", "shape"),
    ("kernels", "*", ("m", "n", "k")),
    ("kernels", "*", ("d", "c"), 2),
    ("kernels", "*", "fields", "*", "shape"),
    ("variants", "*", "*", "fields", "*", "shape"),
    ("accumulate", "*", "fields", "*", "shape"),
)


def lowered_exprs(lowered: dict) -> dict:
    """``lowered.json``'s data as written: shapes as expressions, other Syms as ints."""
    return exprs(lowered, LOWERED_SHAPES)


def compiler_lib_dirs() -> list[tuple[str, str]]:
    """(directory, library) pairs to link against (stage ``link``)."""
    res = subprocess.run(
        [sys.executable, "-m", "cutlass.cute.export.aot_config", "--libdir"],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise ToolError(
            "cannot locate libcute_dsl_runtime (is nvidia-cutlass-dsl installed? "
            "pip install 'coda-spec[build]')"
        )
    import tvm_ffi.libinfo

    return [
        (res.stdout.strip().splitlines()[-1], "cute_dsl_runtime"),
        (os.path.dirname(tvm_ffi.libinfo.find_libtvm_ffi()), "tvm_ffi"),
    ]


def _variant(v: dict, rec: dict) -> dict:
    return {
        "name": config_text(v["config"]),  # the variant's one name (--config syntax)
        "config": v["config"],
        "symbol": v["symbol"],
        "fields": v["fields"],
        "field_order": rec["fields"],
        "majors": rec["majors"],
        "max_swizzle_size": rec["max_swizzle_size"],
        "compile_s": rec["compile_s"],
        "object_bytes": rec["object_bytes"],
        "spills": rec.get("spills"),
    }


def _step_data(step, info, kernels_by_step, records_by_symbol, analysis, lowered, launches) -> dict:
    if step.kind == "kernel":
        k = dict(kernels_by_step[step.name])
        rec = records_by_symbol[k["symbol"]]
        k.update(
            kind="kernel",
            name=step.name,
            field_order=rec["fields"],
            majors=rec["majors"],
            max_swizzle_size=rec["max_swizzle_size"],
            compile_s=rec["compile_s"],
            object_bytes=rec["object_bytes"],
            line=step.loc.line,
            acc_only=_acc_only(step),
        )
        listed = lowered.get("variants", {}).get(step.name) or [
            {"config": lowered["config"], "symbol": k["symbol"], "fields": k["fields"]}
        ]  # variants dropped after compile (spills) have no record
        k["variants"] = [
            _variant(v, records_by_symbol[v["symbol"]])
            for v in listed
            if v["symbol"] in records_by_symbol
        ]
        acc = lowered.get("accumulate", {}).get(step.name)  # a weight gradient's D += result
        k["accumulate"] = (
            _variant(acc, records_by_symbol[acc["symbol"]])
            if acc is not None and acc["symbol"] in records_by_symbol
            else None
        )
        return k
    if step.kind == "finalize":
        data = finalize_data(step, analysis)
        if step.name in launches:
            data["launch"] = launches[step.name]
        folder = next((s for s, e in launches.items() if step.name in e.get("folds", ())), None)
        if folder is not None:
            data["folded_into"] = folder
        return data
    data = {
        "kind": "host",
        "name": step.name,
        "over": step.over,
        "reads": list(info.reads),
        "writes": list(info.writes),
        "line": step.loc.line,
        "partials": _host_partials(info, analysis),  # what a reduction over zero rows gives
    }
    if step.name in launches:
        data["launch"] = launches[step.name]
    return data


def _host_partials(info, analysis) -> dict:
    """partial -> its fold (``finalize.partial_fold``: how a finalize combines it)."""

    return {
        t: partial_fold(analysis.tensor(t).partial.reduce)
        for t in info.writes
        if analysis.tensor(t).origin == "partial"
    }


def finalize_data(step, analysis) -> dict:
    """A finalize step as the manifest records it (``n`` defaults to the reduced extent; a Sym
    or the spec's text here, its expression in the written manifest)."""
    p = analysis.tensor(step.of).partial
    n = step.n if step.n is not None else default_n(p.kind, p.width, p.group, p.rows, step.over)
    data = {
        "kind": "finalize",
        "name": step.name,
        "op": step.op,
        "of": step.of,
        "result": step.result,
        "n": n,
        "eps": step.eps,
        "line": step.loc.line,
    }
    if step.over is not None:  # written only when set: older manifests read unchanged
        data["over"] = step.over
    if step.second is not None:
        data["second"] = step.second
    return data


def _acc_only(step) -> bool:
    """Whether a kernel's epilogue is ``store acc`` alone (a GEMM with an empty K then writes
    zeros; the runtime needs no launch for that)."""
    ops = list(step.epilogue)
    return len(ops) == 1 and ops[0].prim == "store" and ops[0].get("store") == "acc"


def step_reads(checked) -> set:
    """Every chain tensor some forward or backward step reads: GEMM operands, host steps'
    ``over``, epilogue items' tensors (the ``reads`` of the analysis, add_to included)."""
    spec, a = checked.spec, checked.analysis
    reads: set = set()
    for s in spec.all_steps():
        if s.kind == "kernel":
            reads |= {s.gemm.a.name, s.gemm.b.name}
        elif s.kind == "host":
            reads.add(s.over)
    for _, info in a.step_infos():
        reads |= set(info.reads)
    return reads


def make_manifest(
    checked, lowered: dict, records: list[dict], library: str | None, launches: dict | None = None
) -> dict:
    """The manifest of a build, every shape an expression over the spec's dims. ``lowered``:
    ``lowered.json``'s data (as ``coda_spec.build.lowered_json`` makes it); ``records``: the
    compile records; ``launches``: {step: launch entry} of the compiled host steps and
    finalizes (``coda_spec.lower.triton_aot``)."""
    spec, a = checked.spec, checked.analysis
    read = step_reads(checked)
    kernels = {k["step"]: k for k in lowered["kernels"]}
    recs = {r["symbol"]: r for r in records}
    steps = [
        _step_data(s, i, kernels, recs, a, lowered, launches or {})
        for s, i in zip(spec.steps, a.steps, strict=True)
    ]
    bsteps = []
    if spec.backward is not None:
        bsteps = [
            _step_data(s, i, kernels, recs, a, lowered, launches or {})
            for s, i in zip(spec.backward.steps, a.backward_steps, strict=True)
        ]
    of = dict(spec.backward.grads) if spec.backward else {}  # gradient -> the tensor it is of
    producer = {t.name: t.producer for t in a.tensors}
    links = []
    for _, info in a.step_infos():
        for t in info.reads:
            if producer.get(t):
                links.append({"from": producer[t], "to": info.name, "tensor": t})
    return with_exprs(
        {
            "format": FORMAT_VERSION,
            "name": spec.name,
            "digest": spec.digest,
            "spec_file": spec.file,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "versions": tool_versions(),
            "config": lowered["config"],
            "configs": lowered.get("configs", [lowered["config"]]),
            "library": library,
            "dims": {d.name: d.size for d in spec.dims},
            "inputs": [
                {
                    "name": t.name,
                    "shape": list(t.shape),
                    "dtype": t.dtype,
                    "ignore_index": t.ignore_index,
                    "required": t.name in read,
                }
                for t in spec.tensors
            ],
            "outputs": [
                {"name": o.name, "dtype": o.dtype, "shape": list(a.tensor(o.name).shape)}
                for o in spec.outputs
            ],
            "tensors": lowered["tensors"],
            "steps": steps,
            "backward_steps": bsteps,
            "grads_in": [
                {"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "of": of.get(t.name)}
                for t in a.tensors
                if t.origin == "grad_in"
            ],
            "backward_outputs": [
                {
                    "name": o.name,
                    "dtype": o.dtype,
                    "shape": list(a.tensor(o.name).shape),
                    "of": of.get(o.name),
                }
                for o in (spec.backward.outputs if spec.backward else ())
            ],
            "links": links,
        }
    )
