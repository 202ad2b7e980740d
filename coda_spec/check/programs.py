"""Expression-program diagnostics for ``analyze``: ``derive`` and ``equivalent_to``.

Part of stage ``analyze``. The programs are parsed and name-checked by ``coda_spec.expr``; this
module turns each ``ExprError`` (a line and column inside the program text) into a diagnostic at the
right place in the YAML file -- a block scalar starts on the next line, a quoted string one column
in (``program_diag``, also used by ``coda_spec.prove.mathcheck``) -- and explains the common
mistakes: a call to an unknown function reported once, not twice; a chain intermediate used where
only inputs exist.
"""

from __future__ import annotations

from coda_spec.errors import Diagnostic
from coda_spec.expr import ExprError, check, parse


def program_diag(src, path, err: ExprError) -> Diagnostic:
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


def check_programs(src, spec, tensors, diags, warnings, produced=frozenset()):
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
