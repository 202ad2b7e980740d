"""Stage ``analyze``: semantic checks and facts about a normalized spec.

Contract
--------
``analyze(src, spec) -> Analysis`` or SpecError with EVERY semantic error found: unknown, shadowed
or not-yet-produced names (with did-you-mean), dim and dtype mismatches, the hardware shape rules
(16-byte TMA rows: N % 8 for 16-bit data; even N for pair modes; head_dim | N), outputs never
written, reductions never finalized, link cycles, misuse of ``backward.save``. Warnings (unused
values or inputs) ride along in ``Analysis.warnings``.

The facts it returns are what lowering, the reference and the manifest need: every chain
tensor's folded shape, dtype and producer (``TensorInfo``); per step its reads and writes, the
accumulator shape, the pairing mode (``plain``, ``acc_pair`` for adjacent-column pairs,
``packed_pair`` for 16-bit pairs twice the accumulator's width) and each epilogue value's kind.

Layer map: chain-level order/cycle checks and backward scoping are here; per-step typing is in
``analyze_steps`` and dispatches to each primitive's ``infer`` through the registry.
"""

from __future__ import annotations

from dataclasses import dataclass

from coda_spec.analyze_steps import StepWalker, TensorInfo
from coda_spec.dims import DimError, fold
from coda_spec.errors import Diagnostic, SpecError, did_you_mean, in_order
from coda_spec.expr import ExprError, check, parse
from coda_spec.ir import Spec
from coda_spec.primitives import registry
from coda_spec.primitives.base import FP8_DTYPES, INDEX_DTYPES
from coda_spec.source import Source


@dataclass(frozen=True)
class Analysis:
    spec: Spec
    tensors: tuple  # tuple[TensorInfo, ...]: inputs, then everything produced, forward first
    steps: tuple  # tuple[StepInfo, ...]
    backward_steps: tuple
    warnings: tuple  # tuple[Diagnostic, ...]

    def tensor(self, name: str) -> TensorInfo:
        return next(t for t in self.tensors if t.name == name)

    def info(self, name: str) -> TensorInfo | None:
        return next((t for t in self.tensors if t.name == name), None)

    def step_infos(self) -> tuple:
        """Every ``(step, StepInfo)``, forward then backward (``Spec.all_steps`` order)."""
        infos = tuple(self.steps) + tuple(self.backward_steps)
        return tuple(zip(self.spec.all_steps(), infos, strict=True))


def _productions(step, prims) -> list[tuple[str, tuple]]:
    """Chain names a step writes, with the spec path of the writing item."""
    if step.kind == "finalize":
        return [(step.result, step.loc.path + ("as",))]
    out = []
    for op in step.epilogue if step.kind == "kernel" else step.body:
        p = prims[op.prim]
        if p.results == "none":
            out.append((op.get("to"), op.loc.path + ("to",)))
        elif p.family == "reduction":
            out.extend((r, op.loc.path + ("as",)) for r in op.results)
    return out


def _consumptions(step, prims) -> list[str]:
    if step.kind == "finalize":
        return [step.of]
    names = [step.gemm.a.name, step.gemm.b.name] if step.kind == "kernel" else [step.over]
    for op in step.epilogue if step.kind == "kernel" else step.body:
        names += [op.get(k) for k in prims[op.prim].tensors if op.get(k) is not None]
    return names


def _order_checks(src, steps, known, prims, diags) -> set:
    """Duplicate producers, use-before-produce and link cycles. Returns names to stay quiet on."""
    producer: dict = {}
    for i, step in enumerate(steps):
        for name, path in _productions(step, prims):
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
        i: {producer[n][0] for n in _consumptions(s, prims) if n in producer}
        for i, s in enumerate(steps)
    }
    quiet = set()
    for i, step in enumerate(steps):
        for name in _consumptions(step, prims):
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


def _inputs(src, spec, sizes, diags) -> dict:
    out = {}
    for t in spec.tensors:
        path = t.loc.path
        shape = []
        for i, d in enumerate(t.shape):
            try:
                shape.append(fold(d, sizes))
            except DimError as e:
                diags.append(src.diag(path + ("shape", i), str(e), e.hint))
                shape = ["?"]  # reported: readers of this tensor stay quiet
                break
        if t.dtype in FP8_DTYPES:
            diags.append(
                src.diag(
                    path + ("dtype",),
                    f"{t.dtype} tensors are not supported in coda 1 yet",
                    "use bf16 or fp16; fp8 GEMMs are planned",
                )
            )
            shape = ["?"]  # reported: readers of this tensor stay quiet
        is_index = t.dtype in INDEX_DTYPES
        if is_index and t.range is None:
            diags.append(
                src.diag(
                    path,
                    f"integer tensor '{t.name}' needs a range",
                    "e.g. range: [0, V], so verify can draw valid indices",
                )
            )
        if t.ignore_index is not None and not is_index:
            diags.append(
                src.diag(
                    path + ("ignore_index",), "ignore_index applies to integer index tensors only"
                )
            )
        if t.range is not None:
            for i, b in enumerate(t.range):
                if isinstance(b, str):
                    try:
                        fold(b, sizes)
                    except DimError as e:
                        diags.append(src.diag(path + ("range", i), str(e), e.hint))
        out[t.name] = TensorInfo(t.name, tuple(shape), t.dtype, "input", "", t.loc, t.ignore_index)
    return out


def program_diag(src, path, err: ExprError, is_block_start: bool = True) -> Diagnostic:
    line, col = src.where(path)
    text = src.lines[line - 1] if 0 < line <= len(src.lines) else ""
    if text[col - 1 : col] in ("|", ">"):  # block scalar: content starts on the next line
        nxt = src.lines[line] if line < len(src.lines) else ""
        indent = len(nxt) - len(nxt.lstrip())
        line, col = line + err.line, indent + err.col
    else:
        quote = 1 if text[col - 1 : col] in ("'", '"') else 0
        line, col = line + err.line - 1, col + quote + err.col - 1
    if line > len(src.lines):  # an empty block scalar on the last line: point at its end
        line, col = max(len(src.lines), 1), len(src.lines[-1]) + 1 if src.lines else 1
    d = src.diag(path, err.message, err.hint)
    return Diagnostic(d.file, line, col, d.path, d.message, d.hint)


def _explain(errs: list, produced: set, text: str = "") -> list:
    """Drop the duplicate 'unknown name' ('unknown attribute') of a call to an unknown function
    (method) and repeated uses of one unknown name, point method errors at the method's name,
    and explain names that are chain intermediates (the program must restate them from the
    inputs)."""
    calls = {
        (e.line, e.col)
        for e in errs
        if e.message.startswith(("unknown function", "unknown method"))
    }
    out, seen = [], set()
    lines = text.splitlines()
    for e in errs:
        quoted = e.message.split("'")[1] if "'" in e.message else ""
        duplicate = e.message.startswith(("unknown name '", "unknown attribute '"))
        if duplicate and (e.line, e.col) in calls:
            continue
        name = quoted if e.message.startswith("unknown name '") else None
        if name is not None:  # each unknown name is reported once, at its first use
            if name in seen:
                continue
            seen.add(name)
        if e.message.startswith(("unknown method '", "unknown attribute '")):
            attr = quoted.strip(".()")
            here = lines[e.line - 1] if 0 < e.line <= len(lines) else ""
            at = here.find("." + attr, e.col - 1)
            if at >= 0:  # the node starts at the receiver; the caret goes under the name
                e = ExprError(e.message, e.line, at + 2, e.hint)
        if name in produced:
            e = ExprError(
                f"'{name}' is a chain intermediate, not an input",
                e.line,
                e.col,
                f"state it from the inputs first, e.g. '{name} = ...' on an earlier line",
            )
        out.append(e)
    return out


def _check_programs(src, spec, tensors, diags, warnings, produced=frozenset()):
    dims = {d.name for d in spec.dims}
    inputs = {t.name for t in spec.tensors}
    for t in spec.tensors:
        if t.derive is None:
            continue
        path = t.loc.path + ("derive",)
        try:
            prog = parse(t.derive, single_expression=True)
            errs = _explain(check(prog, inputs - {t.name}, dims), produced, t.derive)
        except ExprError as e:
            errs = [e]
        diags.extend(program_diag(src, path, e) for e in errs)
    if spec.equivalent_to is None:
        return
    path = ("equivalent_to",)
    try:
        prog = parse(spec.equivalent_to)
        errs = _explain(check(prog, inputs, dims), produced, spec.equivalent_to)
    except ExprError as e:
        diags.append(program_diag(src, path, e))
        return
    diags.extend(program_diag(src, path, e) for e in errs)
    outs = [o.name for o in spec.outputs]
    if not set(prog.targets) & set(outs):
        diags.append(
            src.diag(
                path,
                "equivalent_to assigns none of the outputs",
                "assign at least one of: " + ", ".join(outs),
            )
        )
    for o in spec.outputs:
        if o.name not in prog.targets and not errs:
            warnings.append(
                Diagnostic(
                    src.file,
                    o.loc.line,
                    o.loc.col,
                    f"outputs.{o.name}",
                    f"output '{o.name}' has no counterpart in equivalent_to",
                    severity="warning",
                )
            )


def _backward_scope(src, spec, fwd_tensors, inputs, diags, warnings) -> dict:
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
    writers = {n: (s, path) for s in bw.steps for n, path in _productions(s, prims)}
    reads = {n for s in bw.steps for n in _consumptions(s, prims)}
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
            f.dtype if f.dtype not in INDEX_DTYPES else "fp32",
            "grad_in",
            "",
            src_loc(src, path),
        )
    for o in bw.outputs:
        if o.name not in grad_names:
            warnings.append(
                Diagnostic(
                    src.file,
                    o.loc.line,
                    o.loc.col,
                    f"backward.outputs.{o.name}",
                    f"backward output '{o.name}' is not in backward.grads, so "
                    "'coda check --math' cannot prove it",
                    did_you_mean(o.name, grad_names)
                    or f"declare it as '{o.name}: <forward tensor>' in backward.grads",
                    severity="warning",
                )
            )
    return scope, reported


def src_loc(src, path):
    from coda_spec.ir import Loc

    line, col = src.where(path)
    return Loc(line, col, path)


def _value_sites(steps, prims) -> dict:
    """Epilogue (host body) value name -> the last step computing it, for 'store it' hints."""
    sites = {}
    for step in steps:
        if step.kind == "finalize":
            continue
        for op in step.epilogue if step.kind == "kernel" else step.body:
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


def _check_outputs(
    src, outputs, tensors, produced, diags, section=("outputs",), failed=(), steps=()
):
    sites = _value_sites(steps, registry())
    for o in outputs:
        path = section + (o.name,)
        info = tensors.get(o.name)
        if o.name in failed and o.name not in produced:
            continue  # its step failed to type; that error explains it
        if o.name not in produced and info is not None:
            diags.append(
                src.diag(
                    path,
                    f"output '{o.name}' is a chain input; outputs are tensors the steps write",
                    did_you_mean(o.name, produced) or "remove it from outputs",
                    key=True,
                )
            )
        elif o.name not in produced:
            hint = _store_hint(o.name, sites) or did_you_mean(o.name, produced)
            diags.append(src.diag(path, f"output '{o.name}' is never written", hint, key=True))
        elif info.origin == "partial":
            diags.append(
                src.diag(
                    path,
                    f"output '{o.name}' is a reduction partial",
                    "finalize it and output the finalized name",
                    key=True,
                )
            )
        elif info.dtype != o.dtype:
            diags.append(
                src.diag(
                    path,
                    f"output '{o.name}' is declared {o.dtype} but step "
                    f"'{info.producer}' writes {info.dtype}",
                    "make the store's dtype and the output agree",
                )
            )


def analyze(src: Source, spec: Spec) -> Analysis:
    diags: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    prims = registry()
    sizes = spec.dim_sizes()
    tensors = _inputs(src, spec, sizes, diags)
    known = {n: f"input '{n}' (line {t.loc.line})" for n, t in tensors.items()}
    quiet = _order_checks(src, spec.steps, known, prims, diags)
    # Names some step declares it writes: if that step fails to type, reads stay quiet.
    declared = {n for s in spec.steps for n, _ in _productions(s, prims)}
    outputs = {o.name: o.dtype for o in spec.outputs}
    walker = StepWalker(src, sizes, prims, diags, warnings, outputs)
    steps = walker.walk(spec.steps, dict(tensors), quiet | declared)
    fwd = dict(tensors)
    fwd.update({t.name: t for t in walker.produced})
    produced = {t.name for t in walker.produced}
    _check_outputs(src, spec.outputs, fwd, produced, diags, failed=declared, steps=spec.steps)
    walker.check_unused(spec, set(outputs), warnings)
    _check_programs(src, spec, tensors, diags, warnings, produced)
    bsteps: tuple = ()
    all_tensors = list(fwd.values())
    if spec.backward is not None:
        scope, unwritten = _backward_scope(src, spec, fwd, tensors, diags, warnings)
        bknown = {n: f"forward tensor '{n}'" for n in fwd}
        bknown.update(
            {n: f"gradient input '{n}'" for n, t in scope.items() if t.origin == "grad_in"}
        )
        bquiet = _order_checks(src, spec.backward.steps, bknown, prims, diags)
        # Gradients rejected by _backward_scope (reported there): reading them stays quiet.
        bquiet |= {g for g, of in spec.backward.grads if of not in fwd or g in fwd}
        bdeclared = {n for s in spec.backward.steps for n, _ in _productions(s, prims)}
        bouts = {o.name: o.dtype for o in spec.backward.outputs}
        bwalker = StepWalker(src, sizes, prims, diags, warnings, bouts, forward=fwd)
        grads_in = [t for t in scope.values() if t.origin == "grad_in"]
        bsteps = bwalker.walk(spec.backward.steps, dict(scope), bquiet | bdeclared)
        bmap = dict(scope)
        bmap.update({t.name: t for t in bwalker.produced})
        _check_outputs(
            src,
            spec.backward.outputs,
            bmap,
            {t.name for t in bwalker.produced},
            diags,
            ("backward", "outputs"),
            failed=bdeclared | unwritten,
            steps=spec.backward.steps,
        )
        all_tensors += grads_in + list(bwalker.produced)
    if diags:
        raise SpecError(in_order(diags))
    return Analysis(spec, tuple(all_tensors), steps, bsteps, tuple(warnings))
