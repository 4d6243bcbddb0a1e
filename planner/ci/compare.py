"""Baseline vs candidate: per level and quantity, the change, its direction, and whether it is
outside the noise (pure).

Noise: a latency percentile's order-statistic interval, widened by a design
effect of 2 because requests in one level share engine steps and are not
independent (methodology §2.7); a closed loop's rate from its E2E mean's error
(the rate is concurrency over that mean), an open loop's from its request count
(Poisson), same widening; an error rate's from a two-proportion test. A
percentile that either run has too few independent samples to bound
(``samples_needed``: a p99 needs 299, and pooled ITL counts one per engine
step) is shown but never significant: with fewer, it is the run's maximum,
which one scheduling hiccup of the machine sets. A change is a regression
only when it is worse, larger than the allowed fraction, *and* significant,
so a noisy rerun of the same build passes. Each delta carries the smallest
change its two intervals could have told apart (``detectable``), said beside it.

A baseline may hold several runs of one build: its value is their mean, and their spread is the
machine's run-to-run noise, which one run's samples cannot show (a runner that moves a whole run
by 5% moves every request in it). That spread, where larger, replaces the within-run band of each
run, the candidate's included; the mean of k runs is then known sqrt(k) better.

Two runs in virtual time on the simulator with no step noise and fixed lengths
have no measurement noise at all (``noiseless``): every change between them is
the law's, so they are compared exactly (detectable 0).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from loadgen.level.result import LevelResult
from loadgen.plan_defaults import MAX_REGRESSION
from loadgen.quantity import Metric, samples_needed
from loadgen.results import Results
from planner.evidence.level_values import latency_quantity, quantity_value
from planner.evidence.observations import Z95, percentile_ci_ms

DESIGN_EFFECT = 2.0
MIN_RATE_SAMPLES = 30  # fewer request times than this do not bound their own spread: the count's error instead
#: prefix-cache shares of two runs this far apart (of the prompt tokens the server looked up) are said: their
#: TTFTs differ by prefill one of them skipped
CACHE_SHARE_GAP = 0.10
Direction = Literal["lower", "higher"]

COMPARED: tuple[tuple[str, Direction], ...] = (
    ("ttft_p95", "lower"),
    ("tpot_p50", "lower"),
    ("tpot_p95", "lower"),
    ("itl_p99", "lower"),
    ("e2e_p95", "lower"),
    ("output_tokens_per_s", "higher"),
    ("requests_per_s", "higher"),
    ("error_rate", "lower"),
)
#: a pooling API's level (embeddings, rerank): no token stream, its request latency and rate (inputs/s is the
#: rate times the level's fixed batch)
POOLED_COMPARED: tuple[tuple[str, Direction], ...] = (
    ("e2e_p50", "lower"),
    ("e2e_p95", "lower"),
    ("requests_per_s", "higher"),
    ("error_rate", "lower"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Delta:
    level: str
    quantity: str
    better: Direction
    baseline: float | None
    candidate: float | None
    change: float | None = None  # relative: candidate / baseline - 1 (None: not compared)
    worse: bool = False
    significant: bool = False
    regression: bool = False
    resolvable: bool = True  # False: a percentile one of the runs has too few samples to bound
    # the smallest relative change the two runs' intervals tell apart (0: compared exactly); None: unresolvable
    detectable: float | None = None
    baseline_runs: int = 1  # the baseline's value is the mean of this many runs, its band their spread


def noiseless(results: Results) -> bool:
    """A run whose numbers hold no measurement noise: virtual time on the simulator, no step noise, every
    request's lengths fixed (a length spread's draws differ from seed to seed)."""
    settings = results.settings
    sim = (settings.profile or {}).get("sim") if settings.profile else None
    if not settings.virtual_time or not isinstance(sim, dict) or sim.get("noise_cv"):
        return False
    lengths = [settings.prompt_tokens, settings.output_tokens]
    return all(isinstance(x, dict) and not x.get("spread") for x in lengths)


def _interval(level: LevelResult, quantity: str) -> tuple[float, float] | None:
    value = quantity_value(level, quantity)
    if value is None:
        return None
    if quantity in ("output_tokens_per_s", "requests_per_s"):
        half = Z95 * DESIGN_EFFECT * value * _rate_noise(level)
        return value - half, value + half
    if quantity == "error_rate":
        n = max(level.completed + level.failed, 1)
        half = Z95 * DESIGN_EFFECT * math.sqrt(max(value * (1 - value), 1.0 / n) / n)
        return value - half, value + half
    q = latency_quantity(quantity)
    assert q is not None and q.percentile is not None
    if level.independent_samples(q.metric) < samples_needed(q.percentile):
        return None
    ci = percentile_ci_ms(level, q.metric, q.percentile)
    if ci is None:
        return None
    lo, hi = ci
    return value - DESIGN_EFFECT * (value - lo), value + DESIGN_EFFECT * (hi - value)


def _rate_noise(level: LevelResult) -> float:
    """A rate's relative standard error.

    A closed loop's rate is its concurrency over its E2E mean (Little's law), so it is known as well as
    that mean: the E2E spread over the root of its independent samples (cohorts count once), floored at
    one request in the count. Elsewhere (an open loop's rate follows its random arrivals; a file without
    request times) the count's Poisson error.
    """
    n = max(level.completed, 1)
    e2e = level.histograms[Metric.E2E]
    mean, sd = e2e.mean_us(), e2e.stddev_us()
    independent = level.independent_samples(Metric.E2E)
    if level.load.kind != "concurrency" or not mean or sd is None or independent < MIN_RATE_SAMPLES:
        return 1 / math.sqrt(n)
    return max(sd / mean / math.sqrt(independent), 1 / n)


EXACT = 1e-9  # relative: below it two noiseless runs read the same


@dataclass(frozen=True, slots=True)
class _Baseline:
    """One quantity of a level over the baseline's runs: their mean, and the noise band around it."""

    below: float  # the band's reach below the mean
    above: float
    run_spread: float  # 95% of one run's deviation from another, from the runs' own spread (0: one run)


def _pooled(bases: Sequence[LevelResult], values: Sequence[float], quantity: str) -> _Baseline | None:
    """The noise band around the mean of the baseline's runs' ``values`` at one level: within-run bands
    averaged and widened to the between-run spread where the machine moved runs more than one run's samples
    show, then narrowed by the square root of the run count (the mean of k runs is known that much better).

    None: a run's percentile is unbounded (too few samples: ``_interval``).
    """
    intervals = [_interval(b, quantity) for b in bases]
    if any(i is None for i in intervals):
        return None
    bands = [(v - i[0], i[1] - v) for v, i in zip(values, intervals) if i is not None]
    k = len(values)
    spread = Z95 * statistics.stdev(values) if k > 1 else 0.0
    below = max(sum(b for b, _ in bands) / k, spread) / math.sqrt(k)
    above = max(sum(a for _, a in bands) / k, spread) / math.sqrt(k)
    return _Baseline(below, above, spread)


def compare_level(
    base: LevelResult | Sequence[LevelResult], cand: LevelResult, *, max_regression: float, exact: bool = False
) -> list[Delta]:
    """Each compared quantity's change against the baseline's run, or the mean of its runs.

    ``exact``: every run is noiseless, so any change is the law's. Several baseline runs carry the
    machine's run-to-run noise: a candidate is one more run, so its band is at least that spread too.
    """
    bases = [base] if isinstance(base, LevelResult) else list(base)
    out = []
    # a reasoning model's answer starts after its thinking: the time to first output token is compared too
    reasoning = (("ttfo_p95", "lower"),) if any(b.reasoning_tokens for b in bases) or cand.reasoning_tokens else ()
    compared: tuple[tuple[str, Direction], ...] = (*COMPARED[:1], *reasoning, *COMPARED[1:])
    if cand.pooling:
        compared = POOLED_COMPARED
    label, runs = bases[0].load.label, len(bases)
    for quantity, better in compared:
        found = [v for lv in bases if (v := quantity_value(lv, quantity)) is not None]
        a = statistics.fmean(found) if len(found) == len(bases) else None
        b = quantity_value(cand, quantity)
        if a is None or b is None:
            out.append(
                Delta(level=label, quantity=quantity, better=better, baseline=a, candidate=b, baseline_runs=runs)
            )
            continue
        change = b / a - 1 if a else (0.0 if b == 0 else math.inf)
        worse = b > a if better == "lower" else b < a
        pooled = None if exact else _pooled(bases, found, quantity)
        ib = None if exact else _interval(cand, quantity)
        resolvable = exact or (pooled is not None and ib is not None)
        detectable: float | None
        if exact:
            significant, detectable = abs(b - a) > EXACT * max(abs(a), abs(b), 1e-12), 0.0
        elif pooled is not None and ib is not None:
            lo, hi = b - max(b - ib[0], pooled.run_spread), b + max(ib[1] - b, pooled.run_spread)
            significant = lo > a + pooled.above or hi < a - pooled.below
            detectable = ((pooled.below + pooled.above) + (hi - lo)) / 2 / abs(a) if a else None
        else:
            significant, detectable = False, None
        # an error rate near zero is compared in points, not as a ratio
        big = b - a > max_regression * max(a, 0.01) if quantity == "error_rate" else abs(change) > max_regression
        regression = worse and big and significant
        out.append(
            Delta(
                level=label,
                quantity=quantity,
                better=better,
                baseline=a,
                candidate=b,
                change=change,
                worse=worse,
                significant=significant,
                regression=regression,
                resolvable=resolvable,
                detectable=detectable,
                baseline_runs=runs,
            )
        )
    return out


def compare_results(
    baseline: Results | Sequence[Results], candidate: Results, *, max_regression: float = MAX_REGRESSION
) -> list[Delta]:
    """Every compared quantity of every level present in the candidate and in each baseline run (matched
    by load label); several baseline runs are pooled (``compare_level``)."""
    runs = [baseline] if isinstance(baseline, Results) else list(baseline)
    by_label = [{lv.load.label: lv for lv in run.levels} for run in runs]
    exact = all(noiseless(run) for run in runs) and noiseless(candidate)
    out = []
    for level in candidate.levels:
        bases = [levels[level.load.label] for levels in by_label if level.load.label in levels]
        if len(bases) == len(runs):
            out += compare_level(bases, level, max_regression=max_regression, exact=exact)
    return out


def fingerprint_differences(baseline: Results, candidate: Results) -> list[str]:
    """One phrase per field in which the two runs measured different workloads (empty: comparable)."""
    a, b = baseline.workload_fingerprint(), candidate.workload_fingerprint()
    return [f"{key} {_show(a[key])} vs {_show(b[key])}" for key in a if a[key] != b[key]]


def prefix_cache_differences(baseline: Results, candidate: Results) -> list[str]:
    """One phrase per level at which the server's prefix cache served the two runs' prompts in shares
    ``CACHE_SHARE_GAP`` or more apart (empty: alike, or not counted). A dataset's prompts sent again to a
    server that kept them read a faster TTFT that is not the change being compared."""
    base = {lv.load.label: lv for lv in baseline.levels}
    out = []
    for level in candidate.levels:
        before = base.get(level.load.label)
        a = before.server.prefix_cache_hit_share if before is not None and before.server is not None else None
        b = level.server.prefix_cache_hit_share if level.server is not None else None
        if a is not None and b is not None and abs(b - a) >= CACHE_SHARE_GAP:
            out.append(f"{level.load.label} {a:.0%} vs {b:.0%}")
    return out


def _show(value: Any) -> str:
    if isinstance(value, dict) and set(value) >= {"mean", "dist"}:
        spread = f" spread {value['spread']:g}" if value.get("spread") else ""
        return f"{value['mean']} {value['dist']}{spread}"
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)
