"""``loadgen tune``'s trials: each server start measured, judged and added to the evidence the law is refitted on.

``Search`` holds the trials so far; ``loadgen.cli.tune_cmd`` reads the flags and prints the outcome. The
choice of the next configuration is pure (``planner.capacity.tuning``); the server's lifecycle is
``loadgen.run.server_process``; what is written is ``loadgen.run.tune_record``.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

from loadgen.choices import LoadMode
from loadgen.cli.common import consoles
from loadgen.cli.plan_inputs import PlanFlags, assemble
from loadgen.cli.session_flags import execute, progress_observer
from loadgen.cli.stop_signals import SIGNALS, StopRequested
from loadgen.cli.sweep_cmd import sweep_hooks
from loadgen.inputs.profile import Profile
from loadgen.inputs.tune_spec import BUDGET, SEQS
from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from loadgen.results import Results, save_atomic
from loadgen.run.assembly import TargetOptions, session_from_profile
from loadgen.run.server_process import ServerOutcome, free_port, running_server
from loadgen.run.tune_record import Trial, TuneRecord, save_record
from loadgen.slo_target import SloTarget
from planner import CapacityPlan
from planner import plan as answer
from planner.capacity.tuning import PREFILL_BOUND, TrialVerdict, next_trial, ttft_only
from planner.evidence.verdicts import judge

# the plan's batch where no SLO's curve crossed it: a saturation plateau (measured at the calibration's budget,
# which a trial may have grown), a flat law, a sweep that never reached the SLO
NO_CROSSING = frozenset({"lower bound", "not binding", "capped at max batch", "any batch", "insufficient range"})
MORE_REPLICAS = 3  # --qps: replica counts above the plan's tried in open loop before giving up
FULL_BATCH_EXTRA = 0.1  # a trial's second level: this share more clients than the cap (at least 2)


class Search:
    """The trials so far and the evidence the law is refitted on."""

    def __init__(self, *, serve_cmd: str, url: str, prof: Profile, target: TargetOptions, logs: Path,
                 quiet: bool, start_timeout_s: float, output: Path) -> None:  # fmt: skip
        self.serve_cmd, self.url, self.prof, self.target = serve_cmd, url, prof, target
        self.logs, self.quiet, self.start_timeout_s, self.output = logs, quiet, start_timeout_s, output
        self.trials: list[Trial] = []
        self.verdicts: list[TrialVerdict] = []
        self.evidence: Results | None = None
        self.budget_of: dict[str, int | None] = {}  # each evidence level's label -> the budget it ran at
        self.budget: int | None = None  # the budget of the last trial
        self.verified: dict[str, int] | None = None
        self.replicas: int | None = None
        self.replicas_why = ""

    def run(self, config: dict[str, int], max_restarts: int, deadline: float | None) -> str:
        """Calibrate, then trial after trial; why it stopped."""
        calibrated = self.trial(config, "calibration: the profile's levels at a generous configuration", sweep=True)
        if calibrated is None:
            return "the calibration configuration did not start: fix the command or its values first"
        most = config[SEQS]
        while True:
            plan = self.plan()
            predicted, lower = law_answer(plan) if plan is not None else (None, False)
            step = next_trial(predicted, self.verdicts, most, lower_bound=lower)
            if step.seqs is None:
                if step.verified is not None:
                    self.verified = {**config, SEQS: step.verified} | ({BUDGET: step.budget} if step.budget else {})
                return step.why
            if len(self.trials) - 1 >= max_restarts:
                return f"--max-restarts {max_restarts} reached"
            if deadline is not None and time.monotonic() > deadline:
                return "--time-budget spent"
            config = {**config, SEQS: step.seqs} | ({BUDGET: step.budget} if step.budget is not None else {})
            self.trial(config, step.why, sweep=False, plan=plan)
            if self.verdicts[-1].holds is None:  # measured again in the trial already: another restart buys nothing
                return f"trial {self.trials[-1].number} gave no verdict ({self.trials[-1].verdict})"

    def trial(
        self, config: dict[str, int], why: str, *, sweep: bool, plan: CapacityPlan | None = None
    ) -> Results | None:
        """Measure ``config``: the calibration sweep, or a trial's two levels, judged; the results (None: no start)."""
        prof = (
            self.prof
            if sweep
            else self.prof.with_overrides(
                levels=trial_levels(config[SEQS]), stop=replace(self.prof.stop, stop_on_saturation=False)
            )
        )  # both levels, always: the second queues behind the cap by design
        results = self.measured(config, why, prof)
        if results is None:  # a cap the server will not run (out of memory, a flag it rejects) is no cap to set
            self.verdicts.append(TrialVerdict(seqs=config[SEQS], budget=config.get(BUDGET), holds=False))
            return None
        # the law is refitted on levels the cap did not hold back: a trial's second level queues behind its cap
        fitted = results.levels if sweep else results.levels[:1]
        self.evidence = replace(results, levels=fitted) if self.evidence is None else merged(self.evidence, fitted)
        self.budget_of |= {level.load.label: config.get(BUDGET) for level in fitted}
        self.budget = config.get(BUDGET)
        deciding = {} if sweep or len(results.levels) < 2 else deciding_levels(results.levels, self.prof.slo)
        if sweep:
            verdict, holds = "calibration", None
            measured = {s.key: s.value(results.levels[-1]) for s in self.prof.slo} if results.levels else {}
        elif not deciding:
            verdict, holds, measured = "a level was not measured", None, {}
            self.verdicts.append(TrialVerdict(seqs=config[SEQS], budget=config.get(BUDGET), holds=None))
        else:
            verdict, holds, failures = judged(deciding)
            measured = {s.key: s.value(lv) for s, lv in deciding.items()}
            self.verdicts.append(self.verdict_of(config, holds, failures, deciding))
        predicted = predicted_at(plan, config[SEQS]) if plan is not None else {}
        self.trials[-1] = replace(
            self.trials[-1], verdict=verdict, holds=holds, predicted_ms=predicted, measured=measured
        )
        save_record(self.record("in progress", 0.0), self.output)
        return results

    def verdict_of(
        self,
        config: dict[str, int],
        holds: bool | None,
        failures: dict[str, bool],
        deciding: dict[SloTarget, LevelResult],
    ) -> TrialVerdict:
        """The search's view of a judged trial: a failure of TTFT or E2E alone is the budget's where it can still
        grow (a whole mean prompt does not yet fit beside the cap's decodes)."""
        budget = config.get(BUDGET)
        grows = budget is not None and budget < self.prof.workload.prompt_tokens.mean + config[SEQS]
        short = grows and holds is False and ttft_only(failures)
        prefill = [key for key in failures if key.startswith(PREFILL_BOUND)]
        over = max(
            ((s.value(lv) or 0.0) / s.limit for s, lv in deciding.items() if s.key.startswith(PREFILL_BOUND)),
            default=1.0,
        )
        held = None if holds is None or not prefill else not any(failures[key] for key in prefill)
        return TrialVerdict(
            seqs=config[SEQS], budget=budget, holds=holds, ttft_only=short, ttft_over=over, ttft_held=held
        )

    def measured(self, config: dict[str, int], why: str, prof: Profile) -> Results | None:
        """Start the server at ``config``, run ``prof``'s levels on it, stop it; the trial is recorded as it went
        (None: the server did not start). A stop signal ends the search once the trial is recorded."""
        number = len(self.trials) + 1
        values = {**config, "port": free_port()}
        command, url = self.serve_cmd.format(**values), self.url.format(**values)
        log = self.logs / f"trial-{number}.log"
        err = consoles().err
        if not self.quiet:
            err.print(f"trial {number}: {config} ({why})", highlight=False)
        results_path = self.output.with_name(f"{self.output.stem}-trial-{number}.json")
        with running_server(command, url, log, self.start_timeout_s) as start:
            trial = Trial(number=number, config=config, why=why, server=start.outcome.value, start_s=start.seconds,
                          verdict="", log=str(log), log_tail=start.tail)  # fmt: skip
            if start.outcome is not ServerOutcome.READY:
                verdict = "refused" if start.outcome is ServerOutcome.REFUSED else "never ready"
                self.trials.append(replace(trial, verdict=verdict))
                save_record(self.record("in progress", 0.0), self.output)
                return None
            SIGNALS.rearm()
            results = execute(url, None, lambda base: session_from_profile(prof, base, self.target, command="tune"),
                              lambda _: sweep_hooks(prof, results_path, progress_observer(err, self.quiet)))  # fmt: skip
        save_atomic(results, results_path)
        self.trials.append(replace(trial, verdict="measured", results=str(results_path)))
        if SIGNALS.first is not None:  # stopped mid-trial: what it measured is kept, and the search ends
            self.trials[-1] = replace(self.trials[-1], verdict="interrupted")
            raise StopRequested(SIGNALS.first)
        return results

    def plan(self, qps: float | None = None) -> CapacityPlan | None:
        """The plan on every level measured so far (None before any); with ``qps``, sized for that many requests/s
        of the profile's workload."""
        if self.evidence is None or not self.evidence.levels:
            return None
        # a level whose TTFT (or E2E) failed at a budget since grown says nothing of the budget now: left in, it
        # drew a TTFT crossing (or a saturation plateau) where the grown budget has none
        prefill = [s for s in self.prof.slo if s.key.startswith(PREFILL_BOUND)]
        kept = tuple(
            level
            for level in self.evidence.levels
            if self.budget_of.get(level.load.label) == self.budget or not any(s.met_by(level) is False for s in prefill)
        )
        evidence = replace(self.evidence, levels=kept)
        flags = PlanFlags() if qps is None else PlanFlags(qps=qps, output_tokens=self.prof.workload.output_tokens.mean)
        return answer(assemble(flags, [("the trials", evidence)])).capacity if kept else None

    def verify_replicas(self, config: dict[str, int], qps: float) -> str:
        """Start the server at ``config`` once more and measure the plan's per-replica rate in open loop; a count
        whose rate breaks an SLO is raised by one (at most ``MORE_REPLICAS`` times); what was found."""
        plan = self.plan(qps)
        first = plan.recommended_replicas if plan is not None else None
        if first is None:
            return "the plan gives no replica count for --qps"
        for replicas in range(first, first + MORE_REPLICAS + 1):
            rate = qps / replicas
            prof = self.prof.with_overrides(mode=LoadMode.OPEN, levels=(rate,))
            why = f"--qps {qps:g} on {replicas} replicas: {rate:.3g} requests/s each, in open loop"
            results = self.measured(config, why, prof)
            if results is None or not results.levels:
                return f"the replicas were not verified (trial {len(self.trials)}: {self.trials[-1].verdict})"
            level = results.levels[-1]
            verdict, holds, _ = judged({s: level for s in self.prof.slo})
            self.trials[-1] = replace(self.trials[-1], verdict=verdict, holds=holds,
                                      measured={s.key: s.value(level) for s in self.prof.slo})  # fmt: skip
            save_record(self.record("in progress", 0.0), self.output)
            if holds:
                self.replicas = replicas
                return f"each holds every SLO at {rate:.3g} requests/s in open loop (the plan said {first})"
            if holds is None:
                return f"the replicas were not verified: {verdict}"
        return f"no replica count from {first} to {first + MORE_REPLICAS} held every SLO in open loop"

    def best_so_far(self) -> str:
        """Where the search stopped early: the largest cap that held, and what was left unmeasured."""
        held = [t for t in self.trials[1:] if t.holds and SEQS in t.config]
        if not held:
            return "no configuration held every SLO"
        best = max(held, key=lambda t: t.config[SEQS])
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in best.config.items() if k in (SEQS, BUDGET))
        larger = best.config[SEQS] + 1
        measured = any(t.config.get(SEQS) == larger and t.holds is False for t in self.trials)
        left = "" if measured else f"; {larger} was not measured, so it is not verified as the largest"
        return f"the best that held: {flags} (trial {best.number}){left}"

    def record(self, stopped: str, wall_s: float) -> TuneRecord:
        return TuneRecord(
            serve_cmd=self.serve_cmd,
            slos={s.key: s.limit for s in self.prof.slo},
            trials=tuple(self.trials),
            verified=self.verified,
            stopped=stopped,
            restarts=max(0, len(self.trials) - 1),
            wall_s=wall_s,
            replicas=self.replicas,
            replicas_why=self.replicas_why,
            unverified="" if self.verified is not None else self.best_so_far(),
        )


def merged(evidence: Results, levels: tuple[LevelResult, ...]) -> Results:
    """``evidence`` with ``levels`` added, a load measured again replacing the older level, in load order."""
    fresh = {lv.load.label for lv in levels}
    kept = [lv for lv in evidence.levels if lv.load.label not in fresh]
    return replace(evidence, levels=tuple(sorted([*kept, *levels], key=lambda lv: lv.load.value)))


def law_answer(plan: CapacityPlan) -> tuple[int | None, bool]:
    """The cap to try, and whether it only bounds the answer from below. Each SLO's crossing: measured between
    two levels, or its law's own answer past the levels (a search measures it anyway, where a plan must not
    act on it); where no SLO has either (a saturation plateau met at the calibration's budget, no law), the
    plan's batch, as a lower bound."""
    answers = [
        answer
        for lim in plan.limits
        if (answer := lim.batch if lim.quality not in NO_CROSSING else lim.model_batch) is not None
    ]
    return (min(answers), False) if answers else (plan.max_batch, True)


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
            return f"untrusted ({'; '.join(verdict.problems)})", None, failures
        service += verdict.service
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
