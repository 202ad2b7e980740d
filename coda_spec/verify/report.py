"""What ``coda verify`` reports: the per-output :class:`Check`, the per-chain :class:`Report`,
and their renderings (the terminal table and JUnit XML for CI).

``coda_spec.verify.run`` (the protocol: cases, the pass rule, the runs) builds reports; the CLI
renders them with :func:`render_table` and :func:`junit`. Pure data and text: this module imports
nothing from coda, and neither torch nor the compiler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from xml.sax.saxutils import quoteattr


@dataclass(frozen=True)
class Check:
    case: str
    dims: dict
    output: str
    shape: tuple
    dtype: str
    max_abs_err: float
    rel_err: float
    bound: float
    unwritten: int
    passed: bool
    note: str = ""


@dataclass(frozen=True)
class Report:
    chain: str
    build_dir: str
    seed: int
    device: str
    checks: tuple = ()
    algebra: tuple = ()  # (case, output, rel_err, ok) of equivalent_to vs ref
    skipped: str = ""
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks) and all(a[3] for a in self.algebra)


def with_replaced(report: Report, **kw) -> Report:
    return replace(report, **kw)


def algebra_line(case: str, output: str, rel_err: float, ok: bool) -> str:
    """One ``equivalent_to`` row. An infinite error is an output nothing proves (the spec has no
    ``equivalent_to``, or it does not assign that output): said so, not shown as a number."""
    head = f"equivalent_to [{case}] {output}:"
    if math.isinf(rel_err):
        return (
            f"{head} UNPROVEN (equivalent_to does not give it; add the unfused math, "
            "see coda check --math)"
        )
    return f"{head} rel_err {rel_err:.1e} {'ok' if ok else 'MISMATCH'}"


def render_table(report: Report) -> str:
    lines = [
        f"chain {report.chain}  seed {report.seed}  device {report.device}  "
        f"({report.seconds:.1f}s)  {report.build_dir}"
    ]
    if report.skipped:
        lines.append(f"  {report.skipped}")
    if report.checks:
        lines.append(
            f"  {'case':<7} {'output':<22} {'shape':<18} {'max_abs_err':>11} "
            f"{'rel_err':>9} {'bound':>9}  pass"
        )
        for c in report.checks:
            lines.append(
                f"  {c.case:<7} {c.output:<22} {str(list(c.shape)):<18} "
                f"{c.max_abs_err:>11.3e} {c.rel_err:>9.2e} {c.bound:>9.2e}  "
                f"{'yes' if c.passed else 'NO'}{'  ' + c.note if c.note else ''}"
            )
    for case, out, rel, ok in report.algebra:
        lines.append(f"  {algebra_line(case, out, rel, ok)}")
    for note in report.extra.get("notes", ()):
        lines.append(f"  note: {note}")
    san = report.extra.get("sanitizer")
    if san:
        lines.append(
            f"  sanitizer (memcheck, small case): {san['result']}"
            + (f", {san['errors']} error(s)" if san["errors"] else "")
        )
    verdict = "FAIL" if not report.passed else ("REFERENCE ONLY" if report.skipped else "PASS")
    lines.append(f"  => {verdict}")
    return "\n".join(lines)


def junit(reports: list[Report]) -> str:
    cases_xml, failures = [], 0
    for r in reports:
        for c in r.checks:
            name = quoteattr(f"{r.chain}.{c.case}.{c.output}")
            body = ""
            if not c.passed:
                failures += 1
                msg = quoteattr(f"max_abs_err {c.max_abs_err:.3e} > bound {c.bound:.3e} {c.note}")
                body = f"<failure message={msg}/>"
            cases_xml.append(f'  <testcase classname="coda.verify" name={name}>{body}</testcase>')
        for case, out, rel, ok in r.algebra:
            name = quoteattr(f"{r.chain}.equivalent_to.{case}.{out}")
            body = ""
            if not ok:
                failures += 1
                msg = quoteattr(algebra_line(case, out, rel, ok))
                body = f"<failure message={msg}/>"
            cases_xml.append(f'  <testcase classname="coda.verify" name={name}>{body}</testcase>')
        san = r.extra.get("sanitizer")
        if san:
            name = quoteattr(f"{r.chain}.sanitizer")
            body = ""
            if san["result"] == "unclean":
                failures += 1
                body = f"<failure message={quoteattr(san['detail'][-500:])}/>"
            elif san["result"] == "unavailable":
                body = f"<skipped message={quoteattr(san['detail'])}/>"
            cases_xml.append(f'  <testcase classname="coda.verify" name={name}>{body}</testcase>')
        if r.skipped:
            cases_xml.append(
                f'  <testcase classname="coda.verify" name={quoteattr(r.chain)}>'
                f"<skipped message={quoteattr(r.skipped)}/></testcase>"
            )
    return (
        f'<?xml version="1.0"?>\n<testsuite name="coda verify" tests="{len(cases_xml)}" '
        f'failures="{failures}">\n' + "\n".join(cases_xml) + "\n</testsuite>\n"
    )
