"""The CI gate: thresholds and baseline regressions -> a verdict and an exit code (pure).

Checks are written in the one threshold grammar (``planner.evidence.thresholds``): ``--require``
holds when the run is good; ``--fail-if`` states the failure.

Exit codes: 0 pass; 1 a threshold breached or a real regression; 3 the run
cannot be trusted (client-bound, incomplete, too many errors, too few
samples for a percentile asked): never a silent pass.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from loadgen.level.breakdown import TURN_METRICS
from loadgen.level.result import LevelResult
from loadgen.plan_defaults import MAX_REGRESSION
from loadgen.quantity import samples_needed
from loadgen.results import Results
from loadgen.slo_target import SloTarget
from planner.ci.compare import Delta, compare_results
from planner.evidence.level_values import latency_quantity, quantity_value
from planner.evidence.thresholds import ThresholdSyntaxError, parse_threshold
from planner.evidence.verdicts import UNTRUSTED_ERROR_RATE, judge

EXIT_PASS, EXIT_FAIL, EXIT_UNTRUSTED = 0, 1, 3

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    text: str  # as the user wrote it (or the SLO it came from)
    quantity: str
    op: str  # the condition that must hold
    threshold: float  # ms for latencies, a fraction for ratios
    level: str | None = None  # a load label such as "c=32"; None: every level


def parse_check(text: str, *, fail_if: bool = False) -> Check:
    """Parse a check; with ``fail_if`` the expression is the failure condition and is negated."""
    flag = "--fail-if" if fail_if else "--require"
    try:
        threshold = parse_threshold(text, flag)
    except ThresholdSyntaxError:
        raise ValueError(
            f"{flag} {text!r}: expected QUANTITY OP VALUE[ms|s|%] [@c=N], e.g. 'tpot_p95 < 50ms'"
        ) from None
    op = _NEGATE[threshold.op] if fail_if else threshold.op
    return Check(
        text=threshold.text, quantity=threshold.quantity, op=op, threshold=threshold.value, level=threshold.level
    )


def check_from_slo(slo: SloTarget, level: str | None = None) -> Check:
    """The check a profile's SLO makes, at one level (a label such as ``c=32``) or every level."""
    quantity = "error_rate" if slo.quantity is None else slo.quantity.key
    return Check(text=f"slo {slo.key}: {slo.limit:g}", quantity=quantity, op="<=", threshold=slo.limit, level=level)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    check: Check
    level: str
    value: float | None
    passed: bool  # False also when the level has no data for it
    absent: str | None = None  # why there is no value ("tpot_p95 not in the imported file")
    model: str | None = None  # one model's requests of a level split over several (a LoRA adapter)

    @property
    def where(self) -> str:
        """The level, and the model where the check read one model's requests."""
        return self.level if self.model is None else f"{self.level} model {self.model}"


Side = Literal["service", "runner"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GateVerdict:
    checks: tuple[CheckResult, ...]
    deltas: tuple[Delta, ...]  # baseline comparison (empty without a baseline)
    untrusted: tuple[str, ...]  # why the run cannot be trusted
    max_regression: float
    service_untrusted: tuple[str, ...] = ()  # those of ``untrusted`` the service caused (errors, overload)
    busy: bool = False  # a level is untrusted because the machine running loadgen was busy (client-bound)
    untrusted_levels: tuple[str, ...] = ()  # labels of the levels whose verdict is untrusted
    levels: int = 0  # levels in the run
    attempts: tuple[tuple[str, int], ...] = ()  # levels that counted on a later attempt: (label, attempt)
    max_attempts: int = 1  # 1 + the run's --retries

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]

    @property
    def regressions(self) -> list[Delta]:
        return [d for d in self.deltas if d.regression]

    @property
    def trusted_breaches(self) -> list[str]:
        """The failed checks and regressions at trusted levels: evidence against the service, whatever the
        untrusted levels say."""
        untrusted = set(self.untrusted_levels)
        failed = [
            f"{c.check.text} @{c.where}" for c in self.failed_checks if c.value is not None and c.level not in untrusted
        ]
        return failed + [f"{d.quantity} @{d.level}" for d in self.regressions if d.level not in untrusted]

    @property
    def exit_code(self) -> int:
        """1 on trusted evidence of a breach (the service's), else 3 where the run cannot be trusted (the
        runner's, unless the service's own errors or overload made it so), else 1 or 0 on the checks."""
        if self.trusted_breaches:
            return EXIT_FAIL
        if self.untrusted:
            return EXIT_UNTRUSTED
        return EXIT_FAIL if self.failed_checks or self.regressions else EXIT_PASS

    @property
    def status(self) -> str:
        return {EXIT_PASS: "pass", EXIT_FAIL: "fail", EXIT_UNTRUSTED: "untrusted"}[self.exit_code]

    @property
    def side(self) -> Side | None:
        """Which side failed: the service (a breach, a regression, its own errors or overload) or the
        runner (the measurement: a busy machine, too few samples, an interrupted run); None on a pass."""
        if self.exit_code == EXIT_PASS:
            return None
        if self.exit_code == EXIT_FAIL or self.service_untrusted:
            return "service"
        return "runner"

    @property
    def summary(self) -> str:
        """The last line a CI log shows: the outcome and which side it is about."""
        retried = ", ".join(f"{label} trusted on attempt {n} of {self.max_attempts}" for label, n in self.attempts)
        after = f" after {self.max_attempts} attempts" if self.max_attempts > 1 else ""
        if self.exit_code == EXIT_PASS:
            return "pass" + (f" ({retried})" if retried else "")
        if self.exit_code == EXIT_FAIL:
            what = [f"{len(self.failed_checks)} check(s) breached"] if self.failed_checks else []
            what += [f"{len(self.regressions)} regression(s)"] if self.regressions else []
            also = f"; untrusted levels too: {', '.join(self.untrusted_levels)}" if self.untrusted_levels else ""
            return f"service failed: {', '.join(what)}{also}"
        if self.side == "service":
            return f"service untrusted: {self.service_untrusted[0]}"
        if self.busy:
            return f"runner busy: {len(self.untrusted_levels)} of {self.levels} levels untrusted{after}"
        if self.untrusted_levels:
            return (
                f"runner: {len(self.untrusted_levels)} of {self.levels} levels untrusted{after} (the "
                "measurement, not the service: see above)"
            )
        return f"runner: {self.untrusted[0]}"


def per_model_checks(check: Check, level: LevelResult) -> list[CheckResult]:
    """A latency (TTFT, TPOT, E2E) or error-rate check on each model's own requests, where the level split them
    over several (LoRA adapters behind one endpoint): one adapter's breach is a breach, named, even where the
    level's pooled value holds. A model with too few requests for the percentile is said and not judged."""
    quantity = latency_quantity(check.quantity)
    per_request = check.quantity == "error_rate" or (quantity is not None and quantity.metric in TURN_METRICS)
    if not level.by_model or not per_request:
        return []
    out = []
    for name in level.by_model:
        view = level.model_view(name)
        if quantity is not None and quantity.percentile is not None:
            n, need = view.independent_samples(quantity.metric), samples_needed(quantity.percentile)
            if n < need:
                why = f"not judged: {n:.0f} of {need} requests a p{quantity.percentile:g} needs"
                out.append(
                    CheckResult(check=check, level=level.load.label, value=None, passed=True, absent=why, model=name)
                )
                continue
        value = quantity_value(view, check.quantity)
        passed = value is not None and _OPS[check.op](value, check.threshold)
        out.append(
            CheckResult(check=check, level=level.load.label, value=value, passed=passed, absent=None, model=name)
        )
    return out


def evaluate_gate(
    current: Results,
    checks: Sequence[Check],
    *,
    baseline: Sequence[Results] = (),
    max_regression: float = MAX_REGRESSION,
    untrusted_error_rate: float = UNTRUSTED_ERROR_RATE,
) -> GateVerdict:
    """Checks per level, the baseline comparison, and the run's trust: the levels' own verdicts
    (``planner.evidence.verdicts``) for the percentiles these checks read, so the gate distrusts exactly
    what every other command flags."""
    levels = {lv.load.label: lv for lv in current.levels}
    results: list[CheckResult] = []
    untrusted: list[str] = []
    if not current.levels:
        untrusted.append("the results file has no levels")
    if not current.complete:
        untrusted.append("the run is incomplete (interrupted or a level failed)")
    for check in checks:
        targets = [levels[check.level]] if check.level in levels else [] if check.level else list(levels.values())
        if check.level and check.level not in levels:
            untrusted.append(
                f"{check.text}: no level {check.level} in the results (levels: {', '.join(levels) or 'none'})"
            )
        for lv in targets:
            value = quantity_value(lv, check.quantity)
            quantity = latency_quantity(check.quantity)
            absent = lv.absent_because(quantity) if value is None and quantity is not None else None
            passed = value is not None and _OPS[check.op](value, check.threshold)
            results.append(CheckResult(check=check, level=lv.load.label, value=value, passed=passed, absent=absent))
            results += per_model_checks(check, lv)
    service: list[str] = []
    busy = False
    untrusted_levels: list[str] = []
    if current.levels:
        asked = [q for c in checks if (q := latency_quantity(c.quantity)) is not None]
        verdicts = judge(current.levels, asked, untrusted_error_rate=untrusted_error_rate)
        untrusted += verdicts.problems
        service = [p for v in verdicts.levels for p in v.service]
        busy = any(lv.client_bound for lv in current.levels)
        untrusted_levels = [v.label for v in verdicts.levels if not v.trusted]
    deltas: list[Delta] = []
    if baseline:  # one run, or several of one build whose spread is the runner's noise
        deltas = compare_results(baseline, current, max_regression=max_regression)
        if not deltas:
            untrusted.append("no level of the baseline (in every one of its runs) matches a level of this run")
    return GateVerdict(
        checks=tuple(results),
        deltas=tuple(deltas),
        untrusted=tuple(dict.fromkeys(untrusted)),
        max_regression=max_regression,
        service_untrusted=tuple(service),
        busy=busy,
        untrusted_levels=tuple(untrusted_levels),
        levels=len(current.levels),
        attempts=tuple((lv.load.label, lv.attempt) for lv in current.levels if lv.attempt > 1),
        max_attempts=1 + current.settings.retries,
    )
