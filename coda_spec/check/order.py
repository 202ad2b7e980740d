"""Chain-level checks for ``analyze``: who writes each name, and when, and what leaves.

Part of stage ``analyze``. Over a section's steps (forward, or backward): duplicate producers, names
that shadow inputs, use before produce and link cycles (``order_checks``); the names a backward
section starts from -- saved forward tensors and incoming gradients, whose direction is declared,
never inferred (``backward_scope``); and the outputs: written, not a chain input, not a raw
reduction partial, of the declared dtype (``check_outputs``). Typing each step is ``check.steps``'s
job; these checks need only which names each step reads and writes (``productions``,
``consumptions``).
"""

from __future__ import annotations

from coda_spec.check.facts import TensorInfo
from coda_spec.errors import Diagnostic, did_you_mean
from coda_spec.ir import Loc
from coda_spec.primitives import registry
from coda_spec.primitives.base import INDEX_DTYPES, MASK_DTYPES


def productions(step, prims) -> list[tuple[str, tuple]]:
    """Chain names a step writes, with the spec path of the writing item."""
    if step.kind == "finalize":
        return [(step.result, step.loc.path + ("as",))]
    out = []
    for op in step.ops:
        p = prims[op.prim]
        if p.results == "none":
            out.append((op.get("to"), op.loc.path + ("to",)))
        elif p.family == "reduction":
            out.extend((r, op.loc.path + ("as",)) for r in op.results)
    return out


def consumptions(step, prims) -> list[str]:
    if step.kind == "finalize":
        return list(step.partials())
    names = [step.gemm.a.name, step.gemm.b.name] if step.kind == "kernel" else [step.over]
    for op in step.ops:
        names += [op.get(k) for k in prims[op.prim].tensors if op.get(k) is not None]
    return names


def order_checks(src, steps, known, prims, diags) -> set:
    """Duplicate producers, use-before-produce and link cycles. Returns names to stay quiet on."""
    producer: dict = {}
    for i, step in enumerate(steps):
        for name, path in productions(step, prims):
            if name in known:
                diags.append(src.diag(path, f"'{name}' shadows {known[name]}", "choose a new name"))
            elif name in producer:
                j, _ = producer[name]
                first = steps[j]
                diags.append(
                    src.diag(
                        path,
                        f"'{name}' is already written by step "
                        f"'{first.name}' (line {first.loc.line})",
                        "every chain tensor is written once; choose a new name",
                    )
                )
            else:
                producer[name] = (i, path)
    deps = {
        i: {producer[n][0] for n in consumptions(s, prims) if n in producer}
        for i, s in enumerate(steps)
    }
    quiet = set()
    for i, step in enumerate(steps):
        for name in consumptions(step, prims):
            if name not in producer or producer[name][0] < i:
                continue
            j = producer[name][0]
            cycle = _find_path(deps, j, i)
            quiet.add(name)
            if cycle is not None or j == i:
                loop = " -> ".join(steps[k].name for k in [i] + (cycle or []))
                diags.append(
                    src.diag(
                        step.loc.path,
                        f"link cycle: {loop} (through '{name}')",
                        "a chain runs in order; break the loop",
                    )
                )
            else:
                diags.append(
                    src.diag(
                        step.loc.path,
                        f"step '{step.name}' reads '{name}' before "
                        f"step '{steps[j].name}' (line {steps[j].loc.line}) "
                        "writes it",
                        f"move '{step.name}' after '{steps[j].name}'",
                    )
                )
    return quiet


def _find_path(deps, start, goal):
    """Steps from ``start`` back to ``goal`` following dependencies, or None."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        if node == goal:
            return path
        if node in seen:
            continue
        seen.add(node)
        stack.extend((d, path + [d]) for d in deps.get(node, ()))
    return None


def backward_scope(src, spec, fwd_tensors, inputs, diags, warnings) -> dict:
    """The names a backward section starts from: saved forward tensors and incoming gradients.

    Gradient direction is declared, never inferred from what the steps happen to write: a
    ``backward.grads`` entry listed in ``backward.outputs`` is PRODUCED by the backward steps;
    every other entry is INCOMING (a cotangent the caller passes). Each error names the
    direction a gradient was taken as and why, so a typo in a ``to:`` cannot silently turn a
    produced gradient into a required input.
    """
    bw = spec.backward
    prims = registry()
    scope = {}
    for i, name in enumerate(bw.save):
        if name not in fwd_tensors:
            diags.append(
                src.diag(
                    ("backward", "save", i),
                    f"cannot save '{name}': no forward tensor has that name",
                    did_you_mean(name, fwd_tensors),
                )
            )
        else:
            scope[name] = fwd_tensors[name]
    writers = {n: (s, path) for s in bw.steps for n, path in productions(s, prims)}
    reads = {n for s in bw.steps for n in consumptions(s, prims)}
    bouts = {o.name for o in bw.outputs}
    grad_names = {g for g, _ in bw.grads}
    reported = set()  # produced gradients no step writes: reported here, not as outputs
    for grad, of in bw.grads:
        path = ("backward", "grads", grad)
        if of not in fwd_tensors:
            diags.append(
                src.diag(
                    path,
                    f"'{grad}' is the gradient of unknown tensor '{of}'",
                    did_you_mean(of, fwd_tensors),
                )
            )
            continue
        if grad in fwd_tensors:
            diags.append(
                src.diag(
                    path,
                    f"gradient name '{grad}' shadows a forward tensor",
                    "name gradients d_<name>",
                )
            )
            continue
        if grad in bouts:
            if grad not in writers:
                unread = sorted(n for n in writers if n not in grad_names)
                hint = did_you_mean(grad, unread)
                diags.append(
                    src.diag(
                        ("backward", "outputs", grad),
                        f"'{grad}' is a produced gradient of '{of}' (backward.outputs lists "
                        "it), but no backward step writes it",
                        (hint + " " if hint else "")
                        + f"write it with '- {{store: ..., to: {grad}}}', or remove it from "
                        "backward.outputs if it is an incoming gradient",
                        key=True,
                    )
                )
                reported.add(grad)
            continue
        if grad in writers:
            step, wpath = writers[grad]
            diags.append(
                src.diag(
                    wpath,
                    f"'{grad}' is an incoming gradient (backward.outputs does not list it), "
                    f"but step '{step.name}' writes it",
                    f"if the backward produces the gradient of '{of}', add '{grad}' to "
                    "backward.outputs; if it is incoming, write another name",
                )
            )
            continue
        if grad not in reads:
            unread = sorted(n for n in writers if n not in grad_names)
            hint = did_you_mean(grad, unread)
            diags.append(
                src.diag(
                    path,
                    f"'{grad}' is taken as an incoming gradient of '{of}' (backward.outputs "
                    "does not list it), but no backward step reads it",
                    (hint + " " if hint else "")
                    + f"if the backward produces '{grad}', list it in backward.outputs",
                    key=True,
                )
            )
        f = fwd_tensors[of]
        scope[grad] = TensorInfo(
            grad,
            f.shape,
            f.dtype if f.dtype not in INDEX_DTYPES + MASK_DTYPES else "fp32",
            "grad_in",
            "",
            src_loc(src, path),
        )
    recomputed = _recomputes(src, bw, fwd_tensors, grad_names, bouts, diags)
    for o in bw.outputs:
        if o.name not in grad_names and o.name not in recomputed:
            warnings.append(
                Diagnostic(
                    src.file,
                    o.loc.line,
                    o.loc.col,
                    f"backward.outputs.{o.name}",
                    f"backward output '{o.name}' is neither in backward.grads nor in "
                    "backward.recomputes, so 'coda check --math' cannot prove it",
                    " ".join(
                        x for x in (did_you_mean(o.name, grad_names), unlisted_hint(o.name)) if x
                    ),
                    severity="warning",
                )
            )
    return scope, reported


def unlisted_hint(name: str) -> str:
    """How to declare a backward output nothing proves (check's warning, --math's error)."""
    return (
        f"a gradient: declare it as '{name}: <forward tensor>' in backward.grads; a recomputed "
        f"forward value (an activation stored for a weight gradient): as '{name}: <forward "
        "tensor>' in backward.recomputes"
    )


def _recomputes(src, bw, fwd_tensors, grad_names, bouts, diags) -> set:
    """The ``backward.recomputes`` entries (output -> the forward tensor it recomputes), each
    a produced backward output of a known forward tensor, never a gradient too."""
    out = set()
    for name, of in bw.recomputes:
        path = ("backward", "recomputes", name)
        if of not in fwd_tensors:
            why = f"'{name}' recomputes unknown tensor '{of}'", did_you_mean(of, fwd_tensors)
        elif name in fwd_tensors:
            why = (
                f"recomputed value '{name}' shadows a forward tensor",
                f"name it {name}_r (it is stored by the backward, beside '{name}')",
            )
        elif name in grad_names:
            why = (
                f"'{name}' is in backward.grads and backward.recomputes",
                "a backward output is a gradient or a recomputed forward value: keep one",
            )
        elif name not in bouts:
            why = (
                f"'{name}' recomputes '{of}', but backward.outputs does not list it",
                f"add '{name}' to backward.outputs (the backward step that stores it produces it)",
            )
        else:
            out.add(name)
            continue
        diags.append(src.diag(path, why[0], why[1], key=True))
    return out


def src_loc(src, path):
    line, col = src.where(path)
    return Loc(line, col, path)


def _value_sites(steps, prims) -> dict:
    """Epilogue (host body) value name -> the last step computing it, for 'store it' hints."""
    sites = {}
    for step in steps:
        if step.kind == "finalize":
            continue
        for op in step.ops:
            p = prims[op.prim]
            if p.results != "none" and p.family != "reduction":
                sites.update(dict.fromkeys(op.results, step))
    return sites


def _store_hint(name, sites) -> str:
    step = sites.get(name)
    if step is None:
        return ""
    what = "kernel" if step.kind == "kernel" else "host step"
    return f"add `- {{store: {name}}}` to {what} '{step.name}' (line {step.loc.line})"


def check_outputs(
    src, outputs, tensors, produced, diags, section=("outputs",), failed=(), steps=()
):
    sites = _value_sites(steps, registry())
    noun = "gradient" if section[:1] == ("backward",) else "output"  # a backward output is one
    for o in outputs:
        path = section + (o.name,)
        info = tensors.get(o.name)
        if o.name in failed and o.name not in produced:
            continue  # its step failed to type; that error explains it
        if o.name not in produced and info is not None:
            diags.append(
                src.diag(
                    path,
                    f"{noun} '{o.name}' is a chain input; outputs are tensors the steps write",
                    did_you_mean(o.name, produced) or "remove it from outputs",
                    key=True,
                )
            )
        elif o.name not in produced:
            hint = _store_hint(o.name, sites) or did_you_mean(o.name, produced)
            diags.append(src.diag(path, f"{noun} '{o.name}' is never written", hint, key=True))
        elif info.origin == "partial":
            diags.append(
                src.diag(
                    path,
                    f"{noun} '{o.name}' is a reduction partial",
                    "finalize it and output the finalized name",
                    key=True,
                )
            )
        elif info.dtype != o.dtype:
            diags.append(
                src.diag(
                    path,
                    f"{noun} '{o.name}' is declared {o.dtype} but step "
                    f"'{info.producer}' writes {info.dtype}",
                    "make the store's dtype and the output agree",
                )
            )
