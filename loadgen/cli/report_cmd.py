"""``loadgen report`` and ``loadgen compare``: offline, on results files (``gate``: gate_cmd.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table as RichTable

from loadgen.cli.bounds import bounded
from loadgen.cli.common import check_writable, consoles, friendly_errors, write_output
from loadgen.cli.plan_options import (
    BucketOpt,
    CurrentBatchOpt,
    KvCapacityOpt,
    MaxNumBatchedTokensOpt,
    MixOpt,
    PredictLevelsOpt,
    ScaleUpOpt,
    SpareOpt,
    TrafficOpt,
    VariantOpt,
)
from loadgen.errors import UsageError
from loadgen.plan_defaults import MAX_REGRESSION, MAX_UTILIZATION

if TYPE_CHECKING:
    from loadgen.cli.plan_inputs import PlanFlags
    from loadgen.results import Results
    from planner import CapacityPlan
    from planner.ci.compare import Delta
    from planner.fleet.fleet_plan import FleetPlan
    from planner.reports.document import Plot, Report

FORMATS = ".md", ".html", ".csv"
MATPLOTLIB_MISSING = (
    "-o *.html draws plots with matplotlib, which is not installed: pip install 'loadgen[html]' (or write .md or .csv)"
)


def profile_gate_levels(results: Results) -> tuple[str, ...] | None:
    """The levels (labels) where the stored profile promises its SLOs, if it names them."""
    from loadgen.load import Load

    levels = results.settings.profile_section("gate").get("levels")
    if not levels:
        return None
    open_loop = results.settings.profile_section("load").get("mode") == "open"
    return tuple(Load(kind="rate" if open_loop else "concurrency", value=float(v)).label for v in levels)


def html_plots(capacity: CapacityPlan) -> tuple[Plot, ...]:
    """The HTML report's plots; matplotlib is imported only here (the ``html`` extra)."""
    try:
        from planner.reports.plots import all_plots
    except ImportError:
        raise UsageError(MATPLOTLIB_MISSING) from None
    return all_plots(capacity)


@friendly_errors
def report(
    results_files: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="[RESULTS]...",
            help="Results of `run` or `sweep`; several (sweeps at different prompt lengths) report the plan for "
            "the mix given by --prompt-tokens and --output-tokens. None with --variant (a fleet report).",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Write report.md, report.html or report.csv (default: print to the terminal).",
        ),
    ] = None,
    slo: Annotated[
        list[str] | None, typer.Option(metavar="TEXT", help="SLO, e.g. tpot_p95<50ms (default: the profile's).")
    ] = None,
    profile: Annotated[str | None, typer.Option(metavar="TEXT", help="Take SLOs from this profile.")] = None,
    qps: Annotated[float | None, typer.Option(metavar="NUMBER", help="Target QPS for the replica plan.")] = None,
    output_tokens: Annotated[
        float | None, typer.Option(metavar="NUMBER", help="Output tokens per request for the plan.")
    ] = None,
    prompt_tokens: Annotated[
        float | None,
        typer.Option(metavar="NUMBER", help="With several RESULTS: prompt tokens per request of the mix to plan for."),
    ] = None,
    predict_levels: PredictLevelsOpt = None,
    current_batch: CurrentBatchOpt = None,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
    kv_capacity_tokens: KvCapacityOpt = None,
    variant: VariantOpt = None,
    traffic: TrafficOpt = None,
    bucket: BucketOpt = "60s",
    scale_up_s: ScaleUpOpt = 0.0,
    spare: SpareOpt = 0,
    mix: MixOpt = False,
    max_utilization: Annotated[
        float | None,
        typer.Option(
            metavar="NUMBER",
            help=f"Utilization target per replica, in (0, 1] (default: the profile's, or {MAX_UTILIZATION:g}).",
        ),
    ] = None,
    price: Annotated[
        float | None,
        typer.Option(
            metavar="USD",
            help="A `loadgen tune` record: USD per replica-hour, for each trial's cost per million output tokens.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", metavar="", help="Print the report's sections as JSON.")] = False,
) -> None:
    """Capacity report: SLO verdicts, the fitted law, max batch, replicas, caveats (terminal, Markdown, HTML, CSV)."""
    said = {name: value for name, value in locals().items() if name not in ("output", "json_out", "price")}
    from loadgen.cli.plan_inputs import PlanFlags, read_plan_inputs
    from planner import plan as answer
    from planner.reports.fleet_report import build_fleet_report
    from planner.reports.report import build_mix_report, build_report

    if output is not None and output.suffix not in FORMATS:
        raise UsageError(f"-o {output}: the suffix picks the format; expected one of {', '.join(FORMATS)}")
    if output is not None:
        check_writable(output)
    if _reported_a_tune_record(results_files, output, price, json_out):
        return
    flags = PlanFlags(**said)
    if output is not None and output.suffix == ".csv":
        _write_csv(flags, output)
        return
    inputs = read_plan_inputs(flags, check_report_sources)
    html_out = output is not None and output.suffix == ".html"
    if inputs.fleet is not None:
        fleet = answer(inputs).fleet
        assert fleet is not None
        _write(build_fleet_report(fleet, _fleet_plots(fleet) if html_out else ()), output, json_out)
        return
    results = inputs.calibrations[0][1]
    if len(inputs.calibrations) == 1 and (not results.levels or results.pooling):  # what ran, nothing to plan
        _write(build_report(results, None, inputs.request.slos, ()), output, json_out)
        return
    outcome = answer(inputs)
    assert outcome.capacity is not None
    plots = html_plots(outcome.capacity) if html_out else ()
    if len(inputs.calibrations) > 1:
        doc = build_mix_report(
            list(inputs.calibrations), outcome.capacity, inputs.request.slos, plots, outcome.predicted
        )
    else:
        doc = build_report(results, outcome.capacity, inputs.request.slos, plots)
    _write(doc, output, json_out)


def _reported_a_tune_record(files: list[Path] | None, output: Path | None, price: float | None, json_out: bool) -> bool:
    """Report a ``loadgen tune`` record (True), or refuse ``--price`` for anything else."""
    from loadgen.run.tune_record import tune_record_json

    bounded("--price", price, minimum=0, exclusive=True)
    record = tune_record_json(files[0]) if files and len(files) == 1 else None
    if record is not None and (output is None or output.suffix != ".csv"):
        _write(_tune_report(record, price, output is not None and output.suffix == ".html"), output, json_out)
        return True
    if price is not None:
        raise UsageError("--price prices the trials of a `loadgen tune` record: give its tune.json alone")
    return False


def _tune_report(record: dict[str, Any], price: float | None, html_out: bool) -> Report:
    """A ``loadgen tune`` record's report: its trials, each read from its results file, and their front."""
    from loadgen.results import load
    from planner.reports.tune_report import build_tune_report, front_points, tpot_slo

    levels = {}
    for trial in record["trials"]:
        path = trial.get("results")
        if isinstance(path, str) and Path(path).exists():
            levels[int(trial["number"])] = load(Path(path)).levels
    points = front_points(record, levels)
    plots: tuple[Plot, ...] = ()
    if html_out:
        try:
            from planner.reports.plots import tune_front
        except ImportError:
            raise UsageError(MATPLOTLIB_MISSING) from None
        slo = tpot_slo(record)
        plots = (tune_front(points, slo.limit if slo is not None else None),)
    return build_tune_report(record, points, price_per_hour=price, plots=plots)


def check_report_sources(flags: PlanFlags) -> None:
    """RESULTS or --variant (a fleet report), not both."""
    if flags.variant and flags.results_files:
        raise UsageError("--variant reports a fleet from each variant's results: give no RESULTS beside it")
    if not flags.variant and not flags.results_files:
        raise UsageError("give one or more RESULTS (or --variant for a fleet report)")


def _write_csv(flags: PlanFlags, output: Path) -> None:
    """``-o *.csv``: one results file's levels, no plan."""
    from loadgen.results import load
    from planner.reports.render_csv import to_csv

    if flags.variant:
        raise UsageError("-o *.csv holds one results file's levels: a fleet report is .md or .html")
    check_report_sources(flags)
    if len(flags.results_files or []) > 1:
        raise UsageError("-o *.csv holds one results file's levels: give one RESULTS")
    assert flags.results_files
    write_output(output, to_csv(load(flags.results_files[0])))
    consoles().err.print(f"report written to {output}", highlight=False)


def _write(doc: Report, output: Path | None, json_out: bool) -> None:
    from loadgen.cli.render import rich_report
    from planner.reports.render_html import to_html
    from planner.reports.render_markdown import to_markdown

    if json_out:
        typer.echo(json.dumps(doc.to_json(), indent=2))
    elif output is None:
        consoles().out.print(rich_report(doc))
    if output is None:
        return
    write_output(output, to_html(doc) if output.suffix == ".html" else to_markdown(doc))
    consoles().err.print(f"report written to {output}", highlight=False)


def _fleet_plots(fleet: FleetPlan) -> tuple[Plot, ...]:
    try:
        from planner.reports.plots import fleet_over_time
    except ImportError:
        raise UsageError(MATPLOTLIB_MISSING) from None
    return (fleet_over_time(fleet),)


@friendly_errors
def compare(
    files: Annotated[
        list[Path], typer.Argument(metavar="A B [...]", help="Results files; the first is the reference.")
    ],
    max_regression: Annotated[
        float, typer.Option(metavar="NUMBER", help="Changes beyond this fraction (and outside the noise) are marked.")
    ] = MAX_REGRESSION,
    json_out: Annotated[bool, typer.Option("--json", metavar="", help="Print the comparison as JSON.")] = False,
    allow_mismatch: AllowMismatchOpt = False,
) -> None:
    """Side-by-side table of two or more results, with direction-aware deltas and significance marks."""
    from loadgen.results import load
    from planner.ci.compare import compare_results

    if len(files) < 2:
        raise UsageError("compare needs at least two results files")
    runs = [load(f) for f in files]
    reference = runs[0]
    for path, run in zip(files[1:], runs[1:]):
        check_comparable(files[0], reference, path, run, allow_mismatch)
    comparisons = [compare_results(reference, other, max_regression=max_regression) for other in runs[1:]]
    if json_out:
        doc = [{"file": str(f), "deltas": [dataclasses.asdict(d) for d in c]} for f, c in zip(files[1:], comparisons)]
        typer.echo(json.dumps({"reference": str(files[0]), "comparisons": doc}, indent=2))
        return
    table = RichTable(title=f"reference: {files[0]}", title_justify="left")
    table.add_column("level")
    table.add_column("quantity")
    for name in column_names(files):
        table.add_column(name, justify="right")
    keyed = [{(d.level, d.quantity): d for d in c} for c in comparisons]
    for (level, quantity), first in keyed[0].items():
        cells = [level, quantity, _num(first.baseline, quantity)]
        for k in keyed:
            d = k.get((level, quantity))
            cells.append(_delta_cell(d) if d else "-")
        table.add_row(*cells)
    consoles().out.print(table)
    consoles().err.print(
        "* outside the noise; ? too few samples to bound that percentile; red worse, green better (direction-aware)",
        highlight=False,
    )


def column_names(files: list[Path]) -> list[str]:
    """Each file's name, with as many parent folders as it takes to tell apart files of one name
    (``a/sweep.json`` and ``b/sweep.json``); the same path twice keeps its place as a suffix."""
    names = []
    for k, f in enumerate(files):
        parts = f.parts
        depth = 1
        while depth < len(parts) and any(g != f and g.parts[-depth:] == parts[-depth:] for g in files):
            depth += 1
        name = str(Path(*parts[-depth:]))
        names.append(name if files.index(f) == k else f"{name} (#{k + 1})")
    return names


AllowMismatchOpt = Annotated[
    bool,
    typer.Option(
        "--allow-mismatch",
        metavar="",
        help="Compare runs of different workloads anyway (API, model, prompt/output lengths, load mode).",
    ),
]


def check_comparable(base_path: Path, base: Results, path: Path, run: Results, allowed: bool) -> None:
    """A comparison of different workloads reads as regressions that are not: refuse it unless asked. One
    the server's prefix cache served unlike is warned of (enabling the cache can be the change compared)."""
    from planner.ci.compare import fingerprint_differences, prefix_cache_differences

    differences = fingerprint_differences(base, run)
    if differences and not allowed:
        raise UsageError(
            f"{base_path} and {path} measured different workloads ({'; '.join(differences)}); "
            "compare like with like, or pass --allow-mismatch"
        )
    if cached := prefix_cache_differences(base, run):
        consoles().err.print(
            f"warning: the server's prefix cache served {base_path} and {path} different shares of their prompt "
            f"tokens ({'; '.join(cached)}): their TTFTs differ by prefill one run skipped (prompts the server "
            "had kept from an earlier run?), not only by the change compared",
            highlight=False,
            markup=False,
        )


UNITS = {"output_tokens_per_s": "tok/s", "requests_per_s": "req/s"}  # latency quantities are in ms


def _num(value: float | None, quantity: str) -> str:
    """A compared value with its unit: ``51.2 ms``, ``1,226.0 tok/s``, an error rate as ``0.50%``."""
    if value is None:
        return "-"
    if quantity == "error_rate":
        return f"{value:.2%}"
    number = f"{value:,.4g}" if abs(value) < 1 else f"{value:,.1f}"
    return f"{number} {UNITS.get(quantity, 'ms')}"


def _delta_cell(d: Delta) -> str:
    if d.candidate is None or d.change is None:
        return _num(d.candidate, d.quantity)
    colour = (
        "red" if d.worse and abs(d.change) > 0.005 else "green" if not d.worse and abs(d.change) > 0.005 else "white"
    )
    mark = "*" if d.significant else "" if d.resolvable else "?"
    return f"{_num(d.candidate, d.quantity)} [{colour}]({d.change:+.1%}{mark})[/]"


def register(app: typer.Typer) -> None:
    app.command("report")(report)
    app.command("compare")(compare)
