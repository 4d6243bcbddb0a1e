"""``loadgen tune``: start the server, calibrate, plan, restart at the plan, measure, refit, until the answer holds.

The wiring of issue 72's loop: the server's lifecycle is ``loadgen.run.server_process``, the choice of the
next configuration ``planner.capacity.tuning``, the plan the same ``planner.plan`` every command asks, and
what is written ``loadgen.run.tune_record``. Trial 1 sweeps the profile's levels at a generous configuration;
every later trial is one closed-loop level at the batch cap it tries (``--max-num-seqs`` = clients), whose
level joins the evidence the law is refitted on.
"""

from __future__ import annotations

import math
import string
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from loadgen.cli.common import EXIT_RUN_ERROR, check_writable, consoles, friendly_errors
from loadgen.cli.options import LOAD, TARGET, OutputOpt, QuietOpt
from loadgen.cli.plan_inputs import PlanFlags, assemble, parse_slos
from loadgen.cli.session_flags import execute, http_options, progress_observer, target_options
from loadgen.cli.stop_signals import SIGNALS, StopRequested
from loadgen.cli.sweep_cmd import parse_levels, sweep_hooks
from loadgen.errors import UsageError
from loadgen.inputs.profile import Profile, find_profile, load_profile
from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from loadgen.results import Results, save_atomic
from loadgen.run.assembly import TargetOptions, session_from_profile
from loadgen.run.server_process import ServerOutcome, free_port, running_server
from loadgen.run.session import Scrape, Start
from loadgen.run.tune_record import Trial, TuneRecord, save_record
from loadgen.slo_target import SloTarget
from loadgen.wire.client import Transport
from loadgen.wire.loops import EventLoop
from loadgen.wire.sse import Convention
from planner import CapacityPlan
from planner import plan as answer
from planner.capacity.tuning import TrialVerdict, next_trial, ttft_only
from planner.evidence.verdicts import judge

SEQS = "max_num_seqs"
FULL_BATCH_EXTRA = 0.1  # a trial's second level: this share more clients than the cap (at least 2)
BUDGET = "max_num_batched_tokens"
DEFAULT_START = {SEQS: 256, BUDGET: 8192}  # generous: most engines' defaults or above


@friendly_errors
def tune(
    serve_cmd: Annotated[
        str,
        typer.Option(
            metavar="TEMPLATE",
            rich_help_panel=TARGET,
            help="The server's command, with {max_num_seqs} (searched), {max_num_batched_tokens} (grown where TTFT "
            "alone fails), {port} (a free one each start) and any {name} --set fixes, e.g. 'vllm serve M --port "
            "{port} --max-num-seqs {max_num_seqs} --max-num-batched-tokens {max_num_batched_tokens}'.",
        ),
    ],
    url: Annotated[
        str,
        typer.Option(metavar="URL", rich_help_panel=TARGET, help="Where the started server answers ({port} filled)."),
    ] = "http://127.0.0.1:{port}/v1",
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
    duration: Annotated[
        float | None, typer.Option(metavar="SECONDS", rich_help_panel=LOAD, help="Measured duration per level.")
    ] = None,
    warmup: Annotated[
        float | None, typer.Option(metavar="SECONDS", rich_help_panel=LOAD, help="Warm-up per level.")
    ] = None,
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
        int, typer.Option(min=1, max=100, metavar="N", rich_help_panel=LOAD, help="Server starts after the first.")
    ] = 6,
    time_budget: Annotated[
        float | None,
        typer.Option(min=1, metavar="SECONDS", rich_help_panel=LOAD, help="No new trial starts after this long."),
    ] = None,
    start_timeout: Annotated[
        float,
        typer.Option(
            min=1,
            metavar="SECONDS",
            rich_help_panel=TARGET,
            help="How long a start may take before the server is 'never ready' (a GPU engine loads for minutes).",
        ),
    ] = 600.0,
    output: OutputOpt = Path("tune.json"),
    quiet: QuietOpt = False,
) -> None:
    """Search the server's batch cap (and token budget) by restarting it at the plan's answer until it holds."""
    started = time.monotonic()
    names = template_names(serve_cmd) | template_names(url)
    if SEQS not in names:
        raise UsageError(f"--serve-cmd: the template has no {{{SEQS}}} for the search to set")
    fixed = parse_sets(set_ or [], names)
    config = {n: fixed.get(n, DEFAULT_START[n]) for n in (SEQS, BUDGET) if n in names} | fixed
    if missing := sorted(names - set(config) - {"port"}):
        raise UsageError(f"--serve-cmd: no value for {{{missing[0]}}}: give --set {missing[0]}=N")
    prof = load_profile(find_profile(profile))
    prof = prof.with_overrides(
        slo=parse_slos(slo) if slo else None,
        levels=tuple(int(v) for v in parse_levels(levels, "closed") or ()) or None,
        duration_s=duration,
        warmup_s=warmup,
    )
    if not prof.slo or not any(s.metric is not None for s in prof.slo):
        raise UsageError(f"--profile {profile}: no latency SLO to tune for: give --slo 'tpot_p95<50ms'")
    check_writable(output)
    logs = output.with_name(output.stem + "-logs")
    target = target_options(None, None, http_options(600.0, False, Transport.NATIVE, 4.0, "X-Request-Id", EventLoop.AUTO),
                            1, None, Scrape.AUTO, Convention.TOKENS, Start.STAGGERED)  # fmt: skip
    search = Search(serve_cmd=serve_cmd, url=url, prof=prof, target=target, logs=logs, quiet=quiet,
                    start_timeout_s=start_timeout, output=output)  # fmt: skip
    stopped, code = "", 0
    try:
        stopped = search.run(config, max_restarts, None if time_budget is None else started + time_budget)
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


class Search:
    """The trials so far and the evidence the law is refitted on."""

    def __init__(self, *, serve_cmd: str, url: str, prof: Profile, target: TargetOptions, logs: Path,
                 quiet: bool, start_timeout_s: float, output: Path) -> None:  # fmt: skip
        self.serve_cmd, self.url, self.prof, self.target = serve_cmd, url, prof, target
        self.logs, self.quiet, self.start_timeout_s, self.output = logs, quiet, start_timeout_s, output
        self.trials: list[Trial] = []
        self.verdicts: list[TrialVerdict] = []
        self.evidence: Results | None = None
        self.verified: dict[str, int] | None = None

    def run(self, config: dict[str, int], max_restarts: int, deadline: float | None) -> str:
        """Calibrate, then trial after trial; why it stopped."""
        calibrated = self.trial(config, "calibration: the profile's levels at a generous configuration", sweep=True)
        if calibrated is None:
            return "the calibration configuration did not start: fix the command or its values first"
        most = config[SEQS]
        while True:
            plan = self.plan()
            step = next_trial(plan.max_batch if plan is not None else None, self.verdicts, most)
            if step.seqs is None:
                if step.verified is not None:
                    self.verified = {**config, SEQS: step.verified} | ({BUDGET: step.budget} if step.budget else {})
                return step.why
            if len(self.trials) - 1 >= max_restarts:
                return f"--max-restarts {max_restarts} reached"
            if deadline is not None and time.monotonic() > deadline:
                return "--time-budget spent"
            config = {**config, SEQS: step.seqs} | ({BUDGET: step.budget} if step.budget is not None else {})
            if self.trial(config, step.why, sweep=False, plan=plan) is None and self.trials[-1].server != "ready":
                return f"the server did not start at {config}: see {self.trials[-1].log}"

    def trial(
        self, config: dict[str, int], why: str, *, sweep: bool, plan: CapacityPlan | None = None
    ) -> Results | None:
        """Start the server at ``config``, measure, stop it; the results (None: it did not start, or no level)."""
        number = len(self.trials) + 1
        port = free_port()
        values = {**config, "port": port}
        command, url = self.serve_cmd.format(**values), self.url.format(**values)
        log = self.logs / f"trial-{number}.log"
        err = consoles().err
        if not self.quiet:
            err.print(f"trial {number}: {config} ({why})", highlight=False)
        with running_server(command, url, log, self.start_timeout_s) as start:
            if start.outcome is not ServerOutcome.READY:
                verdict = "refused" if start.outcome is ServerOutcome.REFUSED else "never ready"
                self.trials.append(Trial(number=number, config=config, why=why, server=start.outcome.value,
                                         start_s=start.seconds, verdict=verdict, log=str(log), log_tail=start.tail))  # fmt: skip
                self.verdicts.append(TrialVerdict(seqs=config[SEQS], budget=config.get(BUDGET), holds=None))
                return None
            prof = self.prof if sweep else self.prof.with_overrides(levels=trial_levels(config[SEQS]))
            results_path = self.output.with_name(f"{self.output.stem}-trial-{number}.json")
            SIGNALS.rearm()
            results = execute(url, None, lambda base: session_from_profile(prof, base, self.target, command="tune"),
                              lambda _: sweep_hooks(prof, results_path, progress_observer(err, self.quiet)))  # fmt: skip
        save_atomic(results, results_path)
        if SIGNALS.first is not None:
            raise StopRequested(SIGNALS.first)
        # the law is refitted on levels the cap did not hold back: a trial's second level queues behind its cap
        fitted = results.levels if sweep else results.levels[:1]
        self.evidence = replace(results, levels=fitted) if self.evidence is None else merged(self.evidence, fitted)
        predicted = predicted_at(plan, config[SEQS]) if plan is not None else {}
        deciding = {} if sweep or len(results.levels) < 2 else deciding_levels(results.levels, self.prof.slo)
        if not deciding:
            verdict, holds = ("calibration" if sweep else "a level was not measured"), None
        else:
            verdict, holds, failures = judged(deciding)
            budget_can_grow = BUDGET in config
            self.verdicts.append(TrialVerdict(seqs=config[SEQS], budget=config.get(BUDGET), holds=holds,
                                              ttft_only=budget_can_grow and holds is False and ttft_only(failures)))  # fmt: skip
        measured = {s.key: s.value(lv) for s, lv in deciding.items()} if deciding else {}
        if sweep and results.levels:  # the calibration's largest level, for the terminal's line
            measured = {s.key: s.value(results.levels[-1]) for s in self.prof.slo}
        self.trials.append(Trial(number=number, config=config, why=why, server="ready", start_s=start.seconds,
                                 verdict=verdict, holds=holds, predicted_ms=predicted, measured=measured,
                                 results=str(results_path), log=str(log)))  # fmt: skip
        save_record(self.record("in progress", 0.0), self.output)
        return results

    def plan(self) -> CapacityPlan | None:
        """The plan on every level measured so far (None before any)."""
        if self.evidence is None or not self.evidence.levels:
            return None
        return answer(assemble(PlanFlags(), [("the trials", self.evidence)])).capacity

    def record(self, stopped: str, wall_s: float) -> TuneRecord:
        return TuneRecord(
            serve_cmd=self.serve_cmd,
            slos={s.key: s.limit for s in self.prof.slo},
            trials=tuple(self.trials),
            verified=self.verified,
            stopped=stopped,
            restarts=max(0, len(self.trials) - 1),
            wall_s=wall_s,
            unverified="" if self.verified is not None else "no configuration was verified (see the trials)",
        )


def merged(evidence: Results, levels: tuple[LevelResult, ...]) -> Results:
    """``evidence`` with ``levels`` added, a load measured again replacing the older level, in load order."""
    fresh = {lv.load.label for lv in levels}
    kept = [lv for lv in evidence.levels if lv.load.label not in fresh]
    return replace(evidence, levels=tuple(sorted([*kept, *levels], key=lambda lv: lv.load.value)))


def trial_levels(seqs: int) -> tuple[int, int]:
    """A trial's two closed-loop levels: the cap's own clients (TTFT, E2E and errors, as a full server of that
    cap serves them) and a few more (TPOT and ITL: a queue refills each finished slot at once, so every step
    runs the whole cap; at exactly the cap a slot stays empty while its next request prefills, and TPOT reads
    2-3% under what a loaded server of that cap gives: 39 passed a 40 ms SLO the law crosses at 37.5)."""
    return seqs, seqs + max(2, math.ceil(seqs * FULL_BATCH_EXTRA))


def deciding_levels(levels: tuple[LevelResult, ...], slos: tuple[SloTarget, ...]) -> dict[SloTarget, LevelResult]:
    """Each SLO's level in a trial: per-token latencies at the full batch (the second), the rest at the cap."""
    at_cap, full = levels[0], levels[1]
    return {s: full if s.metric in (Metric.TPOT, Metric.ITL) else at_cap for s in slos}


def judged(deciding: dict[SloTarget, LevelResult]) -> tuple[str, bool | None, dict[str, bool]]:
    """A trial against every SLO, each at its level: the verdict text, whether it holds (None: a level the
    measurement made untrusted, or no data), and which SLOs failed."""
    quantities = [q for s in deciding if (q := s.quantity) is not None]
    failures = {s.key: s.met_by(lv) is False for s, lv in deciding.items()}
    service: list[str] = []
    for level in {lv.load.label: lv for lv in deciding.values()}.values():
        verdict = judge((level,), quantities).of(level.load.label)
        if verdict.runner_only:  # the measurement's fault (a busy client, a short window): no answer either way
            return f"untrusted ({level.load.label}: {'; '.join(verdict.problems)})", None, failures
        service += [f"{level.load.label}: {problem}" for problem in verdict.service]
    if any(s.met_by(lv) is None for s, lv in deciding.items()):
        return "no data for an SLO", None, failures
    bad = [
        f"{s.key} {s.value(lv):,.2f} > {s.limit:g} at {lv.load.label}" for s, lv in deciding.items() if failures[s.key]
    ]
    bad = bad or service
    return ("fails: " + ", ".join(bad), False, failures) if bad else ("holds", True, failures)


def predicted_at(plan: CapacityPlan, seqs: int) -> dict[str, float]:
    """The law's value of each SLO it models, at batch ``seqs`` (the plan before the trial)."""
    return {
        limit.slo.key: round(float(limit.model.step_ms(seqs)), 3) for limit in plan.limits if limit.model is not None
    }


def say_outcome(record: TuneRecord, output: Path) -> None:
    """The verified flags first, then one line per trial, predicted against measured."""
    out = consoles()
    if record.verified is not None:
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in record.verified.items() if k in (SEQS, BUDGET))
        out.out.print(f"set {flags}  verified: it holds every SLO as measured, and {record.stopped.split(' and ')[-1]}",
                      highlight=False)  # fmt: skip
    else:
        out.out.print(f"no configuration verified: {record.stopped}", highlight=False)
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
