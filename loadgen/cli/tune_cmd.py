"""``loadgen tune``: start the server, calibrate, plan, restart at the plan, measure, refit, until the answer holds.

The wiring of issue 72's loop: the server's lifecycle is ``loadgen.run.server_process``, the choice of the
next configuration ``planner.capacity.tuning``, the plan the same ``planner.plan`` every command asks, and
what is written ``loadgen.run.tune_record``. Trial 1 sweeps the profile's levels at a generous configuration;
every later trial is one closed-loop level at the batch cap it tries (``--max-num-seqs`` = clients), whose
level joins the evidence the law is refitted on.
"""

from __future__ import annotations

import string
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from loadgen.choices import EventLoop, Scrape, Start, Transport
from loadgen.cli.bounds import bounded
from loadgen.cli.common import EXIT_RUN_ERROR, check_writable, consoles, friendly_errors
from loadgen.cli.options import LOAD, TARGET, DurationOpt, OutputOpt, QuietOpt, WarmupOpt
from loadgen.cli.stop_signals import StopRequested
from loadgen.cli.sweep_cmd import parse_levels
from loadgen.errors import UsageError
from loadgen.inputs.tune_spec import BUDGET, SEQS
from loadgen.limits import MAX_FLEET_RPS
from loadgen.wire.sse import Convention

if TYPE_CHECKING:
    from loadgen.run.tune_record import TuneRecord

TRIAL_RETRIES = 2  # a level the measurement made untrusted is measured again (a restart costs more than a level)
DEFAULT_START = {SEQS: 256, BUDGET: 8192}  # generous: most engines' defaults or above
DEFAULT_URL = "http://127.0.0.1:{port}/v1"
DEFAULT_RESTARTS = 6
DEFAULT_START_TIMEOUT_S = 600.0


@friendly_errors
def tune(
    serve_cmd: Annotated[
        str | None,
        typer.Option(
            metavar="TEMPLATE",
            rich_help_panel=TARGET,
            help="The server's command, with {max_num_seqs} (searched), {max_num_batched_tokens} (grown where TTFT "
            "alone fails), {port} (a free one each start) and any {name} --set fixes, e.g. 'vllm serve M --port "
            "{port} --max-num-seqs {max_num_seqs} --max-num-batched-tokens {max_num_batched_tokens}' (default: the "
            "profile's tune.serve_cmd).",
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            rich_help_panel=TARGET,
            help=f"Where the started server answers, {{port}} filled (default: the profile's tune.url, else {DEFAULT_URL}).",
        ),
    ] = None,
    profile: Annotated[
        str,
        typer.Option(
            "--profile",
            "-p",
            metavar="NAME|FILE",
            rich_help_panel=LOAD,
            help="Workload, SLOs and the calibration levels (see `profile list`).",
        ),
    ] = "chat",
    slo: Annotated[
        list[str] | None,
        typer.Option(metavar="SLO", rich_help_panel=LOAD, help="An SLO over the profile's, e.g. 'tpot_p95<50ms'."),
    ] = None,
    levels: Annotated[
        str | None, typer.Option(metavar="A,B,...", rich_help_panel=LOAD, help="The calibration sweep's levels.")
    ] = None,
    duration: DurationOpt = None,
    warmup: WarmupOpt = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="NAME=N",
            rich_help_panel=TARGET,
            help="A template name's value: fixed, or where the search starts ({max_num_seqs} 256 and "
            "{max_num_batched_tokens} 8192 unless set).",
        ),
    ] = None,
    max_restarts: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=100,
            metavar="N",
            rich_help_panel=LOAD,
            help=f"Server starts after the first (default: the profile's tune.max_restarts, else {DEFAULT_RESTARTS}).",
        ),
    ] = None,
    time_budget: Annotated[
        float | None,
        typer.Option(min=1, metavar="SECONDS", rich_help_panel=LOAD, help="No new trial starts after this long."),
    ] = None,
    qps: Annotated[
        float | None,
        typer.Option(
            metavar="RPS",
            rich_help_panel=LOAD,
            help="Also verify the replicas for this many requests/s of the profile's workload: the plan's count, "
            "measured in open loop at its per-replica rate on the verified configuration (one more start).",
        ),
    ] = None,
    start_timeout: Annotated[
        float | None,
        typer.Option(
            min=1,
            metavar="SECONDS",
            rich_help_panel=TARGET,
            help="How long a start may take before the server is 'never ready' (a GPU engine loads for minutes; "
            f"default: the profile's tune.start_timeout_s, else {DEFAULT_START_TIMEOUT_S:g}).",
        ),
    ] = None,
    output: OutputOpt = Path("tune.json"),
    quiet: QuietOpt = False,
) -> None:
    """Search the server's batch cap (and token budget) by restarting it at the plan's answer until it holds."""
    from loadgen.cli.plan_inputs import parse_slos
    from loadgen.cli.session_flags import http_options, target_options
    from loadgen.cli.tune_search import Search
    from loadgen.inputs.profile import find_profile, load_profile
    from loadgen.run.tune_record import save_record

    started = time.monotonic()
    prof = load_profile(find_profile(profile))
    asked = prof.tune  # the profile's block; each flag given overrides its key
    serve_cmd = serve_cmd or asked.serve_cmd
    if serve_cmd is None:
        raise UsageError(f"--serve-cmd: give the server's command (or tune.serve_cmd in profile {prof.name})")
    url = url or asked.url or DEFAULT_URL
    names = template_names(serve_cmd) | template_names(url)
    if SEQS not in names:
        raise UsageError(f"--serve-cmd: the template has no {{{SEQS}}} for the search to set")
    fixed = {**checked_names(asked.values, names, "tune.set"), **parse_sets(set_ or [], names)}
    config = {n: fixed.get(n, DEFAULT_START[n]) for n in (SEQS, BUDGET) if n in names} | fixed
    if missing := sorted(names - set(config) - {"port"}):
        raise UsageError(f"--serve-cmd: no value for {{{missing[0]}}}: give --set {missing[0]}=N")
    max_restarts = max_restarts or asked.max_restarts or DEFAULT_RESTARTS
    qps = qps if qps is not None else asked.qps
    start_timeout = start_timeout or asked.start_timeout_s or DEFAULT_START_TIMEOUT_S
    prof = prof.with_overrides(
        stop=replace(prof.stop, slo_breach_factor=None),  # a breach is what a trial measures, not a reason to stop
        retries=max(prof.load.retries, TRIAL_RETRIES),
        slo=parse_slos(slo) if slo else None,
        levels=tuple(int(v) for v in parse_levels(levels, "closed") or ()) or None,
        duration_s=duration,
        warmup_s=warmup,
    )
    if not prof.slo or not any(s.metric is not None for s in prof.slo):
        raise UsageError(f"--profile {profile}: no latency SLO to tune for: give --slo 'tpot_p95<50ms'")
    bounded("--qps", qps, minimum=0, exclusive=True, maximum=MAX_FLEET_RPS)
    check_writable(output)
    logs = output.with_name(output.stem + "-logs")
    target = target_options(None, None, http_options(600.0, False, Transport.NATIVE, 4.0, "X-Request-Id", EventLoop.AUTO),
                            1, None, Scrape.AUTO, Convention.TOKENS, Start.STAGGERED)  # fmt: skip
    search = Search(serve_cmd=serve_cmd, url=url, prof=prof, target=target, logs=logs, quiet=quiet,
                    start_timeout_s=start_timeout, output=output)  # fmt: skip
    stopped, code = "", 0
    try:
        stopped = search.run(config, max_restarts, None if time_budget is None else started + time_budget)
        if qps is not None and search.verified is not None:
            search.replicas_why = search.verify_replicas(search.verified, qps)
    except StopRequested as signal_:
        stopped, code = f"interrupted by {signal_.name}: the server was stopped", 128 + signal_.signum
    record = search.record(stopped, time.monotonic() - started)
    save_record(record, output)
    say_outcome(record, output)
    if code:
        raise typer.Exit(code)
    if record.verified is None:
        raise typer.Exit(EXIT_RUN_ERROR)


def template_names(template: str) -> set[str]:
    """The ``{name}`` fields of a command or URL template."""
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name}
    except ValueError as exc:
        raise UsageError(f"template {template!r}: {exc} (write a literal brace as {{{{ or }}}})") from None


def checked_names(values: Mapping[str, int], names: set[str], where: str) -> dict[str, int]:
    """A profile's ``tune.set``, each name one the templates hold."""
    for name in values:
        if name not in names or name == "port":
            raise UsageError(f"{where}.{name}: the templates have no {{{name}}} to set (they have: {sorted(names)})")
    return dict(values)


def parse_sets(texts: list[str], names: set[str]) -> dict[str, int]:
    """``--set NAME=N`` for names the templates hold, each a whole number >= 1."""
    values = {}
    for text in texts:
        name, _, value = text.partition("=")
        if name not in names or name == "port":
            raise UsageError(f"--set {text}: the templates have no {{{name}}} to set (they have: {sorted(names)})")
        try:
            values[name] = int(value)
        except ValueError:
            raise UsageError(f"--set {text}: expected NAME=N, N a whole number") from None
        if values[name] < 1:
            raise UsageError(f"--set {text}: the value must be at least 1")
    return values


def say_outcome(record: TuneRecord, output: Path) -> None:
    """The verified flags first, then one line per trial, predicted against measured."""
    out = consoles()
    if record.verified is not None:
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in record.verified.items() if k in (SEQS, BUDGET))
        out.out.print(f"set {flags}  verified: {record.stopped}", highlight=False)
        if record.replicas is not None:
            replicas = f"{record.replicas} replica{'s' if record.replicas != 1 else ''}"
            out.out.print(f"run {replicas}  {record.replicas_why}", highlight=False)
        elif record.replicas_why:
            out.out.print(f"replicas not verified: {record.replicas_why}", highlight=False)
    else:
        out.out.print(f"no configuration verified: {record.stopped}; {record.unverified}", highlight=False)
    for t in record.trials:
        shown = ", ".join(
            f"{k.removesuffix('_ms')} {v:,.1f}" + (f" (law {t.predicted_ms[k]:,.1f})" if k in t.predicted_ms else "")
            for k, v in t.measured.items() if v is not None and k != "error_rate"
        )  # fmt: skip
        out.out.print(
            f"  trial {t.number} {dict(t.config)}: {t.verdict}{'; ' + shown if shown else ''}", highlight=False
        )
        for line in t.log_tail[-3:]:
            out.out.print(f"      log: {line}", highlight=False)
    out.out.print(f"{record.restarts} restart(s), {record.wall_s:,.0f} s; trials in {output}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune)
