"""``loadgen gate``: a results file judged against SLOs, conditions and a baseline build, as an exit code for CI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from loadgen.cli.bounds import bounded
from loadgen.cli.common import check_writable, consoles, friendly_errors, write_output
from loadgen.cli.report_cmd import AllowMismatchOpt, check_comparable, profile_gate_levels
from loadgen.errors import LoadgenError, UsageError
from loadgen.plan_defaults import MAX_REGRESSION

if TYPE_CHECKING:
    from planner.ci.gate import Check, GateVerdict


@friendly_errors
def gate(
    results_file: Annotated[Path, typer.Argument(metavar="RESULTS", help="The candidate run's results.")],
    baseline: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="FILE",
            help="Results of the baseline build to compare against; repeat it for several runs of that build, "
            "whose spread is the runner's noise (their mean is the baseline).",
        ),
    ] = None,
    require: Annotated[
        list[str] | None,
        typer.Option(
            metavar="TEXT",
            help="A condition that must hold, e.g. 'tpot_p95 < 50ms', "
            "'error_rate < 1%', 'output_tokens_per_s > 1200 @c=32'.",
        ),
    ] = None,
    fail_if: Annotated[
        list[str] | None, typer.Option(metavar="TEXT", help="A condition that fails the gate, e.g. 'ttft_p99 > 2s'.")
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            metavar="TEXT", help="Take SLO thresholds from this profile (default: the profile stored in the results)."
        ),
    ] = None,
    max_regression: Annotated[
        float,
        typer.Option(
            metavar="NUMBER",
            help="Largest tolerated change against the baseline (0.05 = 5%; a 10% regression is caught, as it "
            "would be only half the time at a 10% tolerance).",
        ),
    ] = MAX_REGRESSION,
    untrusted_error_rate: Annotated[
        float, typer.Option(metavar="NUMBER", help="A level failing more requests than this is untrusted.")
    ] = 0.20,
    junit: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Write a JUnit XML report (one test case per check).")
    ] = None,
    summary_md: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Append a Markdown summary (e.g. $GITHUB_STEP_SUMMARY).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", metavar="", help="Print the verdict as JSON.")] = False,
    allow_mismatch: AllowMismatchOpt = False,
) -> None:
    """CI gate: exit 0 pass, 1 breach or regression, 2 usage error, 3 untrusted run.

    1: a threshold breached, or a change from the baseline worse than --max-regression and outside the noise.
    3: the run cannot be trusted (client-bound, incomplete, too many errors, too few samples for a percentile).
    """
    from loadgen.inputs.plan_layers import stored_layer
    from loadgen.inputs.profile import find_profile, load_profile
    from loadgen.load import Load
    from loadgen.results import load
    from planner.ci.gate import check_from_slo, evaluate_gate, parse_check
    from planner.reports.gate_report import to_json as gate_json
    from planner.reports.gate_report import to_markdown as gate_markdown

    bounded("--max-regression", max_regression, minimum=0, exclusive=True, maximum=10)
    bounded("--untrusted-error-rate", untrusted_error_rate, minimum=0, maximum=1)
    for flag, path in (("--junit", junit), ("--summary-md", summary_md)):
        if path is not None:
            check_writable(path, flag)
    try:
        checks: list[Check] = [parse_check(t) for t in require or []]
        checks += [parse_check(t, fail_if=True) for t in fail_if or []]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    results = load(results_file)
    if profile:
        prof = load_profile(find_profile(profile))
        slos = prof.slo
        labels = (
            tuple(
                Load(kind="rate" if prof.load.mode == "open" else "concurrency", value=v).label
                for v in prof.gate.levels
            )
            if prof.gate.levels
            else None
        )
    else:
        slos, labels = stored_layer(results.settings, results_file.name).slos, profile_gate_levels(results)
    checks += [check_from_slo(s, level) for s in slos for level in (labels or (None,))]
    if not checks and not baseline:
        raise UsageError("nothing to check: give --require/--fail-if, a --profile with an slo, or --baseline")
    references = [load(path) for path in baseline or []]
    for path, reference in zip(baseline or [], references):
        check_comparable(path, reference, results_file, results, allow_mismatch)
    verdict = evaluate_gate(
        results, checks, baseline=references, max_regression=max_regression, untrusted_error_rate=untrusted_error_rate
    )
    if json_out:
        typer.echo(json.dumps(gate_json(verdict), indent=2))
    else:
        consoles().out.print(gate_markdown(verdict).rstrip("\n"), markup=False, highlight=False)  # the side: last
    raise typer.Exit(_write_gate_files(verdict, junit, summary_md))


def _write_gate_files(verdict: GateVerdict, junit: Path | None, summary_md: Path | None) -> int:
    """The JUnit file and the step summary, after the verdict is printed: one that cannot be written is said
    in one line, and a passing gate then exits 3 (the runner's side), since CI would miss its report."""
    from planner.ci.gate import EXIT_UNTRUSTED
    from planner.reports.gate_report import to_junit
    from planner.reports.gate_report import to_markdown as gate_markdown

    try:
        if junit is not None:
            write_output(junit, to_junit(verdict), "--junit")
        if summary_md is not None:
            try:
                with open(summary_md, "a", encoding="utf-8") as f:  # appended: CI's step summary is shared
                    f.write(gate_markdown(verdict))
            except OSError as exc:
                raise LoadgenError(f"--summary-md {summary_md}: cannot write ({exc.strerror})") from None
    except LoadgenError as exc:
        consoles().err.print(f"error: {exc}", highlight=False, markup=False)
        return verdict.exit_code or EXIT_UNTRUSTED
    return verdict.exit_code


def register(app: typer.Typer) -> None:
    app.command("gate")(gate)
