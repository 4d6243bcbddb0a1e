"""Renderings of a gate verdict for CI systems: JUnit XML, a Markdown step summary, JSON (pure)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from planner.ci.compare import Delta
from planner.ci.gate import CheckResult, GateVerdict
from planner.reports.markdown import md_text


def _value(quantity: str, value: float | None) -> str:
    if value is None:
        return "no data"
    if quantity in ("error_rate", "goodput_ratio"):
        return f"{value:.2%}"
    if quantity.endswith(("_per_s", "concurrency")):
        return f"{value:,.1f}"
    return f"{value:,.1f} ms"


def _threshold(result: CheckResult) -> str:
    return f"{result.check.op} {_value(result.check.quantity, result.check.threshold)}"


def _detectable(d: Delta) -> str:
    """``exact`` for noiseless runs, else the smallest change told apart, or ``-`` (too few samples)."""
    if d.detectable is None:
        return "-"
    return "exact" if d.detectable == 0 else f"±{d.detectable:.1%}"


def _mark(d: Delta) -> str:
    """The verdict of one compared quantity."""
    if d.regression:
        return "**REGRESSION**"
    if not d.worse:
        return "ok"
    if d.significant:
        return "worse (within tolerance)"
    return "worse (noise)" if d.resolvable else "worse (too few samples to tell)"


def _delta_text(d: Delta) -> str:
    change = "n/a" if d.change is None else f"{d.change:+.1%}"
    return (
        f"{d.quantity}: {_value(d.quantity, d.baseline)} -> {_value(d.quantity, d.candidate)} ({change}"
        f"{', significant' if d.significant else ', within noise' if d.resolvable else ', too few samples to tell'})"
    )


def to_junit(verdict: GateVerdict) -> str:
    """One test case per check, per compared quantity, and one for trustworthiness."""
    suite = ET.Element("testsuite", name="loadgen gate")
    failures = errors = tests = 0
    for r in verdict.checks:
        tests += 1
        name = r.check.text if r.model is None else f"{r.check.text} [model {r.model}]"
        case = ET.SubElement(suite, "testcase", classname=f"loadgen.gate.{r.level}", name=name)
        if not r.passed:
            failures += 1
            msg = f"{r.check.quantity} = {r.absent or _value(r.check.quantity, r.value)}, required {_threshold(r)}"
            ET.SubElement(case, "failure", message=msg, type="threshold").text = msg
    for d in verdict.deltas:
        tests += 1
        case = ET.SubElement(suite, "testcase", classname=f"loadgen.regression.{d.level}", name=d.quantity)
        if d.regression:
            failures += 1
            msg = _delta_text(d)
            ET.SubElement(case, "failure", message=msg, type="regression").text = msg
    tests += 1
    case = ET.SubElement(suite, "testcase", classname="loadgen.gate", name="run is trustworthy")
    if verdict.untrusted:
        errors += 1
        msg = "; ".join(verdict.untrusted)
        ET.SubElement(case, "error", message=msg, type="untrusted").text = msg
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    root = ET.Element("testsuites", tests=str(tests), failures=str(failures), errors=str(errors))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def to_markdown(verdict: GateVerdict) -> str:
    icon = {"pass": "PASS", "fail": "FAIL", "untrusted": "UNTRUSTED"}[verdict.status]
    out = [f"### loadgen gate: {icon} (exit {verdict.exit_code})", ""]
    if verdict.untrusted:
        out += ["**The run cannot be trusted:**", *[f"- {md_text(u)}" for u in verdict.untrusted], ""]
    if verdict.checks:
        out += ["| level | check | value | result |", "|---|---|---:|---|"]
        for r in verdict.checks:
            out.append(
                f"| {md_text(r.where)} | {md_text(r.check.text)} | {r.absent or _value(r.check.quantity, r.value)} | "
                f"{'**FAIL**' if not r.passed else 'not judged' if r.absent else 'pass'} |"
            )
        out.append("")
    if verdict.deltas:
        runs = verdict.deltas[0].baseline_runs
        pooled = f"the mean of {runs} runs, whose spread widens the noise; " if runs > 1 else ""
        out += [
            f"Baseline comparison ({pooled}regression: worse by more than {verdict.max_regression:.0%} and outside the noise; "
            "detectable: the smallest change the two runs' intervals tell apart):",
            "",
            "| level | quantity | baseline | candidate | change | detectable | verdict |",
            "|---|---|---:|---:|---:|---:|---|",
        ]
        for d in verdict.deltas:
            change = "-" if d.change is None else f"{d.change:+.1%}"
            out.append(
                f"| {d.level} | {d.quantity} | {_value(d.quantity, d.baseline)} | "
                f"{_value(d.quantity, d.candidate)} | {change} | {_detectable(d)} | {_mark(d)} |"
            )
        out.append("")
    out.append(f"**{md_text(verdict.summary)}**")
    return "\n".join(out) + "\n"


def to_json(verdict: GateVerdict) -> dict[str, Any]:
    return {
        "status": verdict.status,
        "exit_code": verdict.exit_code,
        "side": verdict.side,
        "summary": verdict.summary,
        "attempts": [{"level": label, "attempt": n, "of": verdict.max_attempts} for label, n in verdict.attempts],
        "untrusted": list(verdict.untrusted),
        "checks": [
            {
                "level": r.level,
                "model": r.model,
                "check": r.check.text,
                "quantity": r.check.quantity,
                "op": r.check.op,
                "threshold": r.check.threshold,
                "value": r.value,
                "absent": r.absent,
                "passed": r.passed,
            }
            for r in verdict.checks
        ],
        "regressions": [
            {
                "level": d.level,
                "quantity": d.quantity,
                "baseline": d.baseline,
                "candidate": d.candidate,
                "change": d.change,
                "worse": d.worse,
                "significant": d.significant,
                "resolvable": d.resolvable,
                "detectable": d.detectable,
                "baseline_runs": d.baseline_runs,
                "regression": d.regression,
            }
            for d in verdict.deltas
        ],
        "max_regression": verdict.max_regression,
    }
