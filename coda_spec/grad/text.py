"""The derived ``backward:`` section as YAML text in the catalogue's style.

One flow mapping per item, a comment after each naming the forward line it differentiates or
recomputes, and a header comment with the section's cost: saved bytes per row and its steps.
``with_backward(text, section)`` appends the section to the forward's own text (a hand-written
``backward:`` is cut first when the caller asks to replace it), so the forward keeps its
formatting and comments.
"""

from __future__ import annotations

import re

from coda_spec.dtypes import element_bytes

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        text = repr(v)
        mantissa, _, exp = text.partition("e")
        if "." not in mantissa and mantissa not in ("inf", "-inf", "nan"):
            mantissa += ".0"
        return mantissa + ("e" + exp if exp else "")
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {scalar(x)}" for k, x in v.items()) + "}"
    v = str(v)
    return v if _PLAIN.match(v) else f'"{v}"'


def _flow(fields) -> str:
    return "{" + ", ".join(f"{k}: {scalar(v)}" for k, v in fields) + "}"


def _comment(line: str, note: str, width: int = 44) -> str:
    if not note:
        return line
    return f"{line.ljust(width)} # {note}" if len(line) < width else f"{line}  # {note}"


def render_steps(steps) -> list:
    out = []
    for s in steps:
        if s.kind == "finalize":
            out.append(_comment(f"    - {_flow(s.head)}", s.note))
            continue
        head = "kernel" if s.kind == "kernel" else "host"
        out.append(_comment(f"    - {head}: {s.name}", s.note))
        key, value = s.head[0]
        out.append(f"      {key}: {scalar(value)}")
        out.append("      epilogue:" if s.kind == "kernel" else "      body:")
        for item in s.items:
            out.append(_comment(f"        - {_flow(item.fields)}", item.note))
    return out


def saved_bytes(analysis, save) -> tuple[int, list]:
    """Bytes per row of the saved ``[M, ...]`` tensors the forward produced (inputs the caller
    holds anyway are not counted), and the list of those tensors."""
    total, rows = 0, []
    for name in sorted(save):
        info = analysis.tensor(name)
        if info.origin == "input" or not info.shape or not isinstance(info.shape[0], str):
            continue
        width = 1
        for d in info.shape[1:]:
            width *= d if isinstance(d, int) else 1
        total += width * element_bytes(info.dtype)
        rows.append(name)
    return total, rows


def section(d, steps, policy: str) -> str:
    """The whole ``backward:`` section of derivation ``d``."""
    st = d.st
    kernels = sum(1 for s in steps if s.kind == "kernel")
    hosts = sum(1 for s in steps if s.kind == "host")
    finals = sum(1 for s in steps if s.kind == "finalize")
    per_row, rows = saved_bytes(d.analysis, st.save)
    order = [t.name for t in d.analysis.tensors]
    save = sorted(st.save, key=order.index)
    incoming = [(g, t) for g, t in st.grads.items() if g not in st.outputs]
    produced = [(g, t) for g, t in st.grads.items() if g in st.outputs]
    n = lambda c, w: f"{c} {w}{'' if c == 1 else 's'}"  # noqa: E731
    lines = [
        f"# backward derived by `coda grad --save {policy}`: {n(kernels, 'GEMM kernel')}, "
        f"{n(hosts, 'host step')}, {n(finals, 'finalize')};",
        f"# saves {per_row} bytes per row of forward results ({', '.join(rows) or 'none'}).",
        "backward:",
        "  doc: >",
        "    Derived by coda grad from the forward steps (CODA's schedule: each epilogue's",
        "    backward runs in the epilogue of the dgrad GEMM that produces its gradient; deferred",
        "    norms take the zdz row dot). Regenerate it rather than editing it by hand.",
        f"  save: [{', '.join(save)}]",
        "  grads:",
    ]
    lines += [f"    {g}: {t}" for g, t in incoming + produced]
    lines.append("  steps:")
    lines += render_steps(steps)
    lines.append("  outputs:")
    lines += [f"    {g}: {st.outputs[g]}" for g, _ in produced]
    return "\n".join(lines) + "\n"


def without_backward(text: str) -> str:
    """``text`` with its top-level ``backward:`` block (and comments right above it) removed."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.startswith("backward:")), None)
    if start is None:
        return text
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i][:1] not in (" ", "\n", "#", "")),
        len(lines),
    )
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    return "".join(lines[:start] + lines[end:])


def with_backward(text: str, backward: str) -> str:
    body = text if text.endswith("\n") else text + "\n"
    return body + backward
