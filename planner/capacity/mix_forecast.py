"""Plans for a length mix the sweeps did not measure: the step model with lengths, asked about one mix (pure).

A calibration is several sweeps, each at one mix (prompt lengths, and where possible output
lengths, that differ). ``forecast_mix`` fits the length model on all of them at once, turns it
into the one-variable law of the asked mix, and answers from it: the largest batch under each TPOT
SLO (on the upper end of the prediction's 95% interval: a number acted on is conservative where
the evidence is thin), the simulated engine for the sizing simulation, the largest request rate
one replica holds under the TTFT/E2E SLOs, and the token budget per step that keeps a step
carrying a prefill chunk under the latency SLO. Every figure is "predicted for a mix not measured".
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loadgen.engine import EngineConfig
from loadgen.level.aggregates import mean_output_tokens, mean_prompt_tokens
from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from loadgen.results import Results
from loadgen.slo_target import SloTarget
from planner.capacity.batch_limit import BatchLimit, floor_note
from planner.evidence.verdicts import judge
from planner.laws.held_out import hold_out
from planner.laws.lengthmodel import (
    LengthModel,
    Mix,
    calibrated_levels,
    fit_length_model,
    points_from_results,
    prompt_group,
    tpot_features,
    ttft_at_idle,
    ttft_idle_features,
)
from planner.laws.slope_split import slope_range
from planner.laws.stepmodel import StepModel, context_tokens, fit_statistic, prompt_pairs
from planner.laws.ttft_residual import TtftResidual

MAX_BUDGET = 1 << 20  # tokens per step: no engine batches more
#: a calibration level whose server found this share of its prompt tokens in the prefix cache is said: its
#: prefill read cheaper than a new prompt's
CACHE_HIT_NOTE_SHARE = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class MixForecast:
    """What the calibration predicts for one mix, and how."""

    mix: Mix
    model: LengthModel  # fitted on TPOT p50 (the mean where the calibration gives no p50): the throughput law
    extrapolation: tuple[str, ...]  # where the mix leaves the calibrated range
    law: StepModel | None = None  # the mean step at the mix (None: the calibration cannot answer for it)
    limits: tuple[BatchLimit, ...] = ()  # per TPOT SLO, each from its own percentile's model
    engine: EngineConfig | None = None  # the fitted engine (max_num_seqs set by the plan)
    max_rate_rps: float | None = None  # one replica, under the TTFT/E2E SLOs, at the plan's batch
    max_rate_note: str = ""
    budget: int | None = None  # recommended --max-num-batched-tokens
    budget_note: str = ""
    warnings: tuple[str, ...] = ()
    tpot_p95: LengthModel | None = None  # fitted on TPOT p95, where a p95 SLO asked for it (a predicted sweep)
    kv_capacity_tokens: int | None = None  # the server's KV cache (None: not known, the batch not checked)
    kv_batch: int | None = None  # the most sequences of the mix it holds whole
    kv_note: str = ""
    ttft_residual: TtftResidual | None = None  # TTFT beyond the fitted engine, by load (predicted levels, sizing)
    # the bootstrap replicates at the 2.5th and 97.5th percentile of a request's E2E at the mix: the interval's ends,
    # the high one the engine the sizing simulation runs (TTFT and replicas on their safe side)
    engine_range: tuple[EngineConfig, EngineConfig] | None = None

    @property
    def sizing_engine(self) -> EngineConfig | None:
        """The engine the sizing simulation runs: the high end of the interval where there is one."""
        return self.engine_range[1] if self.engine_range is not None else self.engine


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictedLevel:
    """One closed-loop level of a sweep not run, at a forecast's mix (``planner.capacity.predicted`` runs it).

    Each TTFT statistic carries its 95% interval: the fitted engine's bootstrap replicates at either end of
    a request's E2E interval, run the same way, plus the residual line at either end of its own."""

    concurrency: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    tpot_p50_ms: float | None
    tpot_p95_ms: float | None  # the TPOT p95 length model at this batch (None: not estimable, or not calibrated)
    ttft_mean_ms: float | None = None
    tpot_mean_ms: float | None = None
    ttft_p50_range_ms: tuple[float, float] | None = None
    ttft_p95_range_ms: tuple[float, float] | None = None
    ttft_mean_range_ms: tuple[float, float] | None = None
    # TPOT's: the engine at either end, and the law at the mix's interval widened to the held-out error
    tpot_p50_range_ms: tuple[float, float] | None = None
    tpot_p95_range_ms: tuple[float, float] | None = None
    tpot_mean_range_ms: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class PredictedSweep:
    """A sweep not run: its levels, and how its requests' lengths were drawn."""

    levels: tuple[PredictedLevel, ...]
    lengths: str  # e.g. "fixed, prompt 1024 / output 64"


def calibration_server_limit(
    calibrations: Sequence[tuple[str, Results]], key: str, given: int | None = None
) -> int | None:
    """A limit of the server the calibration ran on (``max_num_batched_tokens``, ``kv_capacity_tokens``):
    ``given`` (a real server's is not in its results), else where every file says the same (the simulator's
    profile); None: not known (unchunked, for the token budget)."""
    if given is not None:
        return given
    values = {results.settings.profile_section("sim").get(key) for _, results in calibrations}
    value = next(iter(values)) if len(values) == 1 else None
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def scraped_kv_capacity(calibrations: Sequence[tuple[str, Results]]) -> int | None:
    """The KV cache's size in tokens as the server's /metrics said it during the calibration (vLLM's
    ``cache_config_info``), where every level that scraped it read the same; None: not said, or it changed
    (the server restarted with another cache between sweeps)."""
    said = {
        level.server.kv_capacity_tokens
        for _, results in calibrations
        for level in results.levels
        if level.server is not None and level.server.kv_capacity_tokens
    }
    return int(next(iter(said))) if len(said) == 1 else None


KV_BOUND_SHARE = 0.9  # a batch that plateaued below this share of the seat cap was held back by the KV cache
QUEUED_FLOOR = 1.0  # requests the server held waiting on average: it was full, not idle


def inferred_kv_capacity(
    calibrations: Sequence[tuple[str, Results]], max_num_seqs: int | None
) -> tuple[int, str] | None:
    """The KV cache's size as a calibration level that filled it shows, and which level (None: none did).

    A level whose server kept requests waiting while it ran fewer sequences than its seat cap
    (``max_num_seqs``: without it a plateau may be the seats, and nothing is inferred) held as many
    sequences as its cache fits: running x (prompt + output) tokens, each sequence's whole reservation.
    The smallest such reading is taken: a server that reserves as it generates (vLLM) fits more than the
    reservation says, and the inferred size is then low, the safe side for every batch it bounds.
    """
    if max_num_seqs is None:
        return None
    found = []
    for name, results in calibrations:
        for level in results.levels:
            server = level.server
            running, waiting = (server.running_mean, server.waiting_mean) if server is not None else (None, None)
            if running is None or waiting is None or waiting < QUEUED_FLOOR or running >= KV_BOUND_SHARE * max_num_seqs:
                continue
            prompt, output = mean_prompt_tokens([level]), mean_output_tokens([level])
            if prompt is None or output is None:
                continue
            held = running * (prompt + output)
            found.append((int(held), f"{name} {level.load.label}: {running:.1f} sequences of {prompt + output:,.0f} "
                          f"tokens running, {waiting:.1f} waiting, under a cap of {max_num_seqs}"))  # fmt: skip
    return min(found) if found else None


PLATEAU_CLIENTS = 1.2  # clients grew at least this much between two levels ...
PLATEAU_BATCH = 1.05  # ... while the batch grew less than this, and TTFT at least PLATEAU_TTFT-fold
PLATEAU_TTFT = 2.0


def plateau_kv_capacity(calibrations: Sequence[tuple[str, Results]]) -> tuple[int, str] | None:
    """The KV cache's size as a table without a server's gauges shows it, and which levels (None: none did).

    Where a sweep's clients grew but its batch (Little's law) did not, and TTFT multiplied, the server
    held requests back: its cache was full (or its seats were). The tokens it held then, batch x the mean
    context a running sequence holds (its prompt and half its answer), are at most the cache, so the
    largest such reading is the size taken, on the safe side of the truth. NVIDIA's NIM 8B table reads
    895k tokens at 5,000/500 (170 sequences from 200 clients to 250) and 924k at 20,000/2,000; without it,
    20,000/2,000 predicted from the others read TPOT 75-311% high from 100 clients up."""
    found = []
    for name, results in calibrations:
        obs = judge(results.levels).observations
        levels = sorted(zip(obs.levels, obs.results), key=lambda pair: pair[0].concurrency)
        for (a, first), (b, then) in itertools.pairwise(levels):
            ttft_a, ttft_b = ttft_at_idle(first), ttft_at_idle(then)  # TTFT p50 (else the mean) of each
            prompt, output = mean_prompt_tokens([then]), mean_output_tokens([then])
            if (
                b.concurrency < PLATEAU_CLIENTS * a.concurrency
                or not 0 < b.batch < PLATEAU_BATCH * a.batch
                or not ttft_a
                or not ttft_b
                or ttft_b < PLATEAU_TTFT * ttft_a
                or prompt is None
                or output is None
            ):
                continue
            context = context_tokens(prompt, output)
            found.append((int(b.batch * context), f"{name} {a.label} to {b.label}: the batch held at "
                          f"{b.batch:.0f} sequences of {context:,.0f} tokens of context while clients grew "
                          f"{b.concurrency / a.concurrency:.2g}x and TTFT {ttft_b / ttft_a:.2g}x"))  # fmt: skip
    return max(found) if found else None


def throughput_percentile(calibrations: Sequence[tuple[str, Results]]) -> float | None:
    """The TPOT statistic the throughput law rests on: p50 where every calibrated level gives it, else the mean
    (most vendors' tables give means only), as a single sweep's plan does."""
    with_tpot = [level for level in _calibrated(calibrations) if _tpot_ms(level, None) is not None]
    return None if with_tpot and any(_tpot_ms(level, 50.0) is None for level in with_tpot) else 50.0


def absent_statistic(calibrations: Sequence[tuple[str, Results]], percentile: float | None) -> str | None:
    """Why the calibration cannot answer for TPOT's ``percentile`` (None: the mean), where no calibrated level
    gives it; None where some do."""
    levels = _calibrated(calibrations)
    if any(_tpot_ms(level, percentile) is not None for level in levels):
        return None
    name = "mean" if percentile is None else f"p{percentile:g}"
    return f"tpot_{name} not in the calibration (its files give {_given(levels)}): not answered"


def _calibrated(calibrations: Sequence[tuple[str, Results]]) -> list[LevelResult]:
    """Every calibration file's levels the length model reads (trusted, unsaturated)."""
    return [level for name, results in calibrations for _, level in calibrated_levels(results, name)[1]]


def _tpot_ms(level: LevelResult, percentile: float | None) -> float | None:
    return level.mean_ms(Metric.TPOT) if percentile is None else level.percentile_ms(Metric.TPOT, percentile)


def _given(levels: Sequence[LevelResult]) -> str:
    """What TPOT statistics the levels give, e.g. "the TPOT mean only"."""
    have = [f"p{q:g}" for q in (50.0, 90.0, 95.0, 99.0) if any(_tpot_ms(lv, q) is not None for lv in levels)]
    mean = any(_tpot_ms(level, None) is not None for level in levels)
    if not have:
        return "the TPOT mean only" if mean else "no TPOT"
    return "TPOT " + ", ".join(have) + (" and the mean" if mean else "")


def fit_calibration(
    calibrations: Sequence[tuple[str, Results]], percentile: float | None, budget: int | None, seed: int
) -> LengthModel:
    """The length model on TPOT ``percentile`` (None: the mean) over every file's trusted unsaturated levels."""
    points = [p for name, results in calibrations for p in points_from_results(results, name, percentile)]
    model = fit_length_model(points, statistic=fit_statistic(percentile), budget=budget, seed=seed)
    return dataclasses.replace(model, held_out=hold_out(model))


def idle_ttft_bound(model: LengthModel, prompt_tokens: float) -> float | None:
    """TTFT at concurrency 1 for ``prompt_tokens`` at the larger of two readings of the calibration, each of
    which the linear prediction (the optimistic end) can miss:

    - prefill's growth between the two longest calibrated prompts all attention (per attended pair, not per
      token): with two prompt lengths the square term cannot be fitted;
    - every prompt token as dear as the whole TTFT at the longest calibrated prompt: short prompts can ride a
      step's fixed cost (the weights read once, the scheduler's own time), below the knee where prefill
      turns compute-bound, so two short calibrated prompts can show no growth at all.

    vLLM's CPU build, calibrated at 64 and 256, read at 1,024: 81.9 ms where the linear prediction said 50
    and the attention reading 102.6; in two later rounds 48.1 (attention 71.3, per token 100) and 38.2
    (a flat calibration: attention 29.0, per token 58.4)."""
    points = [p for p in model.points if p.kind == "ttft_idle"]
    group = prompt_group(p.mix.prompt_tokens for p in points)
    idle: dict[float, list[tuple[float, float]]] = {}  # a prompt length swept again joins its group
    for point in points:
        idle.setdefault(group[point.mix.prompt_tokens], []).append((point.mix.prompt_tokens, point.value_ms))
    if len(idle) < 2:
        return None
    (short, short_ms), (long, long_ms) = [
        (sum(p for p, _ in rows) / len(rows), sum(v for _, v in rows) / len(rows))
        for _, rows in sorted(idle.items())[-2:]
    ]
    per_pair = max(long_ms - short_ms, 0.0) / (prompt_pairs(long) - prompt_pairs(short))
    attention = long_ms + per_pair * (prompt_pairs(prompt_tokens) - prompt_pairs(long))
    return max(attention, long_ms * prompt_tokens / long)


def prefix_cache_note(calibrations: Sequence[tuple[str, Results]]) -> str:
    """The calibration levels whose prompts the server's prefix cache served in part ("" when none, or when
    the server does not count it). Their prefill, and so the prefill terms fitted on them, read cheaper than a
    prompt the server has not seen: on vLLM a second sweep with the same prompts read 8.3 ms of prefill at
    512 tokens against the first's 16.5."""
    served = [
        f"{name} {lv.label} ({share:.0%})"
        for name, results in calibrations
        for lv, level in calibrated_levels(results, name)[1]
        if level.server is not None
        and (share := level.server.prefix_cache_hit_share) is not None
        and share >= CACHE_HIT_NOTE_SHARE
    ]
    if not served:
        return ""
    return (
        f"the server's prefix cache served part of the calibration's prompts (of the prompt tokens it looked up): "
        f"{', '.join(served)}; those levels prefilled less than a new prompt needs, so the fitted prefill, and every "
        "TTFT predicted from it, read low: sweep them again with prompts the server has not seen (restart it, or turn its prefix "
        "caching off: vLLM's --no-enable-prefix-caching)"
    )


def forecast_mix(
    calibrations: Sequence[tuple[str, Results]],
    mix: Mix,
    slos: Sequence[SloTarget],
    *,
    budget: int | None = None,
    seed: int = 0,
) -> MixForecast:
    """The length model, its law at ``mix`` and the batch limits of the TPOT SLOs there; ``budget``: the
    calibration server's tokens per step, where its results do not hold it."""
    budget = calibration_server_limit(calibrations, "max_num_batched_tokens", budget)
    statistic = throughput_percentile(calibrations)
    model = fit_calibration(calibrations, statistic, budget, seed)
    law = model.at_mix(mix)
    extrapolation = model.extrapolation(mix)
    warnings = _calibration_notes(calibrations, model, mix)
    if law is None:
        return MixForecast(mix=mix, model=model, extrapolation=extrapolation, warnings=tuple(warnings))
    limits = []
    fitted: dict[float | None, LengthModel] = {statistic: model}
    for slo in slos:
        if slo.metric != Metric.TPOT:
            continue
        if (absent := absent_statistic(calibrations, slo.percentile)) is not None:
            limits.append(BatchLimit(slo=slo, quality="insufficient range", note=absent))
            continue
        if slo.percentile not in fitted:
            fitted[slo.percentile] = fit_calibration(calibrations, slo.percentile, budget, seed)
        limits.append(mix_batch_limit(fitted[slo.percentile], mix, slo))
    split = slope_range(model, mix)
    if split:
        warnings.append(split_note(split, law))
    engine: EngineConfig | None = _engine({c.name: c.value for c in model.coefficients})
    # the replicates at either end of a request's E2E at the largest calibrated batch: its prefill and its
    # decode steps together (by idle TTFT alone, the high end once read KV low, and sized a replica short)
    busiest = model.ranges()["batch"][1]
    e2e = ttft_idle_features(mix, budget) + max(mix.output_tokens - 1.0, 0.0) * tpot_features(busiest, mix)
    ends = [model.draw_at(e2e, q) for q in (2.5, 97.5)]
    engine_range = (_engine(ends[0]), _engine(ends[1])) if ends[0] is not None and ends[1] is not None else None
    if model.not_separated:
        engine = None  # the simulation needs every term; the law at the mix still answers the batch
        warnings.append(
            "no sizing simulation: it runs every term of the step, and the calibration did not fit them all"
        )
    return MixForecast(
        mix=mix,
        model=model,
        law=law,
        limits=tuple(limits),
        engine=engine,
        extrapolation=extrapolation,
        warnings=tuple(warnings),
        tpot_p95=fitted.get(95.0),
        engine_range=engine_range if engine is not None else None,
    )


def _calibration_notes(calibrations: Sequence[tuple[str, Results]], model: LengthModel, mix: Mix) -> list[str]:
    """What the plan says of its calibration: prompts the prefix cache served, terms not separated, drift between
    sweeps, the error of its own mixes held out, and prefill taken as linear beyond the calibrated prompts."""
    notes = (
        prefix_cache_note(calibrations),
        model.separation_note(),
        model.drift_note(),
        model.held_out.text if model.held_out is not None else "",
        _linear_prefill_note(model, mix),
    )
    return [note for note in notes if note]


def _engine(coef: Mapping[str, float | None]) -> EngineConfig:
    """The simulated engine of a set of length-model coefficients (a term below zero or not fitted is 0)."""
    return EngineConfig(
        base_ms=max(coef["base_ms"] or 0.0, 0.0),
        per_seq_ms=max(coef["per_seq_ms"] or 0.0, 0.0),
        per_kv_ms=max(coef["per_kv_ms"] or 0.0, 0.0),
        prefill_ms_per_token=max(coef["prefill_ms_per_token"] or 0.0, 0.0),
        prefill_attention_ms=max(coef["prefill_attention_ms"] or 0.0, 0.0),
    )


def _linear_prefill_note(model: LengthModel, mix: Mix) -> str | None:
    """With two prompt lengths calibrated, prefill is linear in the prompt; a longer prompt than calibrated may
    prefill slower (attention grows with its square): said, with the idle TTFT bound to size against."""
    longest = model.ranges()["prompt_tokens"][1]
    if not model.coefficient("prefill_attention_ms").note or mix.prompt_tokens <= longest * 1.05:
        return None
    bound = idle_ttft_bound(model, mix.prompt_tokens)
    return (
        f"prefill is taken as linear in the prompt (two prompt lengths calibrated): attention's share grows "
        f"with its square, so prompts of {mix.prompt_tokens:.0f} tokens, beyond the {longest:.0f} calibrated, "
        "may prefill slower than predicted (TTFT most)"
        + (
            f"; were the growth between the two longest calibrated prompts all attention, or every prompt "
            "token as dear as the whole TTFT at the longest (short prompts riding a step's fixed cost), TTFT "
            f"at an idle server would read up to {bound:,.1f} ms (the bound to size a TTFT SLO against)"
            if bound is not None
            else ""
        )
        + "; a sweep at a third, longer prompt fits it"
    )


def mix_batch_limit(model: LengthModel, mix: Mix, slo: SloTarget) -> BatchLimit:
    """The largest batch whose predicted step, at the upper end of its 95% interval, meets the SLO."""
    law = model.at_mix(mix)
    if law is None:
        return BatchLimit(slo=slo, quality="insufficient range", note=model.separation_note())
    split = slope_range(model, mix)
    extra = 0.0 if split is None else max(split[1] - law.per_seq_ms, 0.0)  # ms a sequence beyond the fitted slope
    point = law.max_batch(slo.limit)
    if point is None and law.meets(1, slo.limit):  # a law that does not grow with the batch bounds no batch
        note = (
            f"predicted for {mix.label}: TPOT does not grow with the batch in the calibration (slope "
            f"{law.per_seq_ms:.3g} ms/seq), so it bounds no batch; sweep again, to a larger concurrency"
        )
        return BatchLimit(slo=slo, quality="insufficient range", model=law, note=note)
    if point is None:
        return BatchLimit(slo=slo, quality="below the floor", model=law, note=floor_note(law, slo))
    batch = point
    while batch >= 1 and (p := model.tpot_range(batch, mix)) is not None:
        if p.high_ms + extra * batch <= slo.limit:
            break
        batch -= 1
    note = (
        f"predicted for {mix.label} (not measured); the law's own answer is {point}, the upper end of its "
        f"{'range' if split else '95% interval'} allows {max(batch, 0)}"
        if batch != point
        else f"predicted for {mix.label} (not measured)"
    ) + (f"; {split_note(split, law)}" if split else "")
    if batch < USEFUL_SHARE * point:
        why = f"the upper end of its {'range' if split else '95% interval'} allows {max(batch, 0)}" + (
            f" ({split_cause(split, law)})" if split and extra > 0.25 * law.per_seq_ms else ""
        )
        note = (
            f"predicted for {mix.label} (not measured): the law's own answer is {point}, but {why}, less than "
            f"{USEFUL_SHARE:.0%} of it: too unsure to act on; {next_sweep(mix, point)}"
        )
        return BatchLimit(slo=slo, model_batch=point, quality="insufficient range", model=law, note=note)
    return BatchLimit(slo=slo, model_batch=point, batch=batch, quality="predicted", model=law, note=note)


#: a safe answer below this share of the law's own is refused, with the sweep that would pin it: a batch a quarter
#: of what the server holds is no plan (two published mixes of gpt-oss-120b were sized 1-4 where the truth is ~23)
USEFUL_SHARE = 0.6


def next_sweep(mix: Mix, point: int) -> str:
    """The one calibration sweep that pins the answer: the asked mix itself, at concurrencies up to past the
    law's answer (its own levels then decide, as for any measured mix)."""
    top = max(4, math.ceil(1.5 * point))
    levels = sorted({1, *(c for c in (2**k for k in range(2, 16)) if c < top), top})
    return (
        f"the sweep that answers it: prompt {mix.prompt_tokens:.0f} / output {mix.output_tokens:.0f} tokens at "
        f"concurrency {','.join(map(str, levels))} (loadgen sweep --prompt-tokens {mix.prompt_tokens:.0f} "
        f"--levels {','.join(map(str, levels))}, the profile's output_tokens {mix.output_tokens:.0f}), given to "
        "plan with the others"
    )


def split_cause(split: tuple[float, float], law: StepModel) -> str:
    """Why the slope is unsure: the calibrated mixes' slopes split into terms more than one way."""
    return (
        f"the calibrated mixes' slopes split into KV and prefill terms several ways, {split[0]:.3g}..{split[1]:.3g} "
        f"ms a sequence at this mix against the fit's {law.per_seq_ms:.3g}"
    )


def split_note(split: tuple[float, float], law: StepModel) -> str:
    """Where the mix's slope rests on the idle engine's prefill (``planner.laws.slope_split``): its range."""
    return (
        f"the slope at the mix ({law.per_seq_ms:.3g} ms a sequence) splits the calibrated mixes' slopes into KV and prefill "
        f"by the prefill an idle server showed, which a step of decodes need not cost: any split allows "
        f"{split[0]:.3g}..{split[1]:.3g} ms a sequence here, and the batch is sized on the high end; a sweep at this mix, "
        "or at another whose prompt and output lengths are off the calibrated mixes' line, pins it"
    )


def recommended_budget(
    law: StepModel, engine: EngineConfig, batch: int, limit_ms: float, prompt_tokens: float
) -> tuple[int | None, str]:
    """The largest token budget per step with which a step of ``batch`` decodes plus one prefill chunk
    stays under ``limit_ms`` (the ITL SLO where given, else the TPOT one): vLLM's ``--max-num-batched-tokens``.
    The chunk is priced where attention costs most: the last of a ``prompt_tokens`` prompt."""
    if engine.prefill_ms_per_token <= 0 and engine.prefill_attention_ms <= 0:
        return None, "no prefill cost fitted: the budget does not bind the latency"
    room = limit_ms - float(law.step_ms(batch))

    def chunk_ms(c: int) -> float:
        p = max(prompt_tokens, 1.0)
        pairs = c * p - c * (c - 1) / 2 if c <= p else c / p * prompt_pairs(p)  # past one prompt: whole ones
        return engine.prefill_ms_per_token * c + engine.prefill_attention_ms * pairs / 1e6

    if room <= 0 or chunk_ms(1) > room:
        return None, f"a step of batch {batch} leaves no room under {limit_ms:g} ms for a prefill chunk"
    low, high = 1, 2
    while chunk_ms(high) <= room and high < MAX_BUDGET:
        low, high = high, high * 2
    while high - low > 1:  # chunk_ms grows with the chunk: the largest that fits
        mid = (low + high) // 2
        low, high = (mid, high) if chunk_ms(mid) <= room else (low, mid)
    attention = (
        f" and {engine.prefill_attention_ms:.3g} ms per 1M attended pairs" if engine.prefill_attention_ms else ""
    )
    return batch + low, (
        f"batch {batch} decodes ({float(law.step_ms(batch)):.1f} ms) plus a {low}-token prefill chunk "
        f"({engine.prefill_ms_per_token:.3g} ms/token{attention}, the prompt's last) stay under {limit_ms:g} ms"
    )
