"""The planner's front door: one typed question (``PlanInputs``), one typed answer (``PlanOutcome``) (pure).

Every command that plans (``sweep``'s headline, ``plan``, ``report``, a fleet) asks here, with data, not
files: the command line reads the files and resolves its flags over the stored profile once
(``loadgen.cli.plan_inputs``); this module chooses the kind of plan (a sweep's, a what-if law's, a mix's
from several calibration sweeps, a fleet's), adds the predicted levels and the validation replay, and
re-plans on the endpoint's terms when the replay corrects the engine. So one question has one answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.errors import UsageError
from loadgen.results import Results
from planner.capacity.capacity_plan import CapacityPlan
from planner.capacity.mix_forecast import MixForecast, PredictedSweep, absent_statistic, fit_calibration
from planner.capacity.plan import plan_from_law, plan_from_results
from planner.capacity.plan_mix import plan_for_mix
from planner.capacity.predicted import closed_loop_budget, predict_levels, predicted_lengths
from planner.capacity.request import PlanRequest
from planner.capacity.validation import MeasuredRequests, ReplayCheck, most_conservative, replay_check
from planner.fleet.demand import Demand
from planner.fleet.fleet_plan import FleetPlan, Variant, plan_fleet, variant_capacity
from planner.laws.lengthsample import LengthSample
from planner.laws.stepmodel import StepModel


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetWords:
    """A dataset's entries in words, as read (the planner turns words into tokens)."""

    name: str  # the file's name, for messages and the sample's source
    prompt_words: tuple[int, ...]
    answer_words: tuple[int | None, ...]  # the recorded answer, None where the entry holds none
    max_tokens: tuple[int | None, ...]
    tokens_per_word: float | None = None  # None: the calibration probe's rate and template overhead


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetVariant:
    """One variant of a fleet: its name, its sweep (read), its price and GPUs per replica."""

    name: str
    spec: str  # as the user wrote it (``NAME=RESULTS,...``), for messages
    source: str  # the results file
    results: Results
    cost_per_gpu_hour: float | None = None
    gpus: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetInputs:
    """A fleet question: the variants, the demand over time, and how the fleet may scale."""

    variants: tuple[FleetVariant, ...]
    demand: Demand
    scale_up_s: float = 0.0
    spare: int = 0
    mix: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanInputs:
    """The whole question. Exactly one source of evidence: ``calibrations`` (one sweep, or several at other
    lengths for a mix), ``law`` (a what-if), or ``fleet``."""

    request: PlanRequest
    calibrations: tuple[tuple[str, Results], ...] = ()
    law: StepModel | None = None
    fleet: FleetInputs | None = None
    dataset: DatasetWords | None = None  # a mix plan's lengths, drawn per request
    predict_levels: tuple[int, ...] = ()  # concurrencies to predict at the mix (a mix plan)
    validation: tuple[MeasuredRequests, ...] = ()  # an open-loop run's levels, replayed through the plan's engine
    validation_source: str = ""  # the records file, for messages


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanOutcome:
    """The whole answer: the capacity plan (or the fleet's), and what was predicted and validated beside it."""

    capacity: CapacityPlan | None = None
    fleet: FleetPlan | None = None
    predicted: PredictedSweep | None = None
    checks: tuple[ReplayCheck, ...] = ()
    validated_law: str = ""  # the engine the replay ran (before any re-plan on its correction)

    def to_json(self) -> dict[str, Any]:
        """``plan --json``: the plan, and the predicted levels and validation where asked."""
        if self.fleet is not None:
            return self.fleet.to_json()
        assert self.capacity is not None
        doc = self.capacity.to_json()
        if self.predicted is not None:
            doc["predicted_levels"] = [dataclasses.asdict(level) for level in self.predicted.levels]
            doc["predicted_lengths"] = self.predicted.lengths
        if self.validated_law:  # validation was asked (its engine exists, or planning refused)
            doc["validation"] = [check.to_json() for check in self.checks]
        return doc


def plan(inputs: PlanInputs) -> PlanOutcome:
    """Answer ``inputs``: the plan of its kind, its predicted levels, and its validation with the corrected
    re-plan. Raises ``UsageError`` (one line, naming what to give) where the evidence cannot answer."""
    if inputs.fleet is not None:
        return PlanOutcome(fleet=_fleet(inputs.fleet, inputs.request))
    request = inputs.request
    if inputs.dataset is not None:
        sample = dataset_sample(inputs.dataset, inputs.calibrations, request.output_tokens)
        request = dataclasses.replace(request, length_sample=sample)
    capacity = _capacity(inputs, request)
    predicted = None
    if inputs.predict_levels and capacity.mix is not None:
        predicted = _predicted(inputs.calibrations, capacity.mix, inputs.predict_levels, request)
    checks = _replayed(capacity, inputs) if inputs.validation_source else ()  # raises without an engine
    validated = capacity.engine.law_text if inputs.validation_source and capacity.engine is not None else ""
    if request.qps and (correction := most_conservative(c.correction for c in checks)) is not None:
        capacity = _capacity(inputs, dataclasses.replace(request, correction=correction))  # the endpoint's terms
    return PlanOutcome(capacity=capacity, predicted=predicted, checks=checks, validated_law=validated)


def _capacity(inputs: PlanInputs, request: PlanRequest) -> CapacityPlan:
    """The capacity plan of the evidence's kind: a mix, one sweep, or a stated law."""
    if len(inputs.calibrations) > 1:
        return _mix(inputs.calibrations, request)
    if inputs.calibrations:
        name, results = inputs.calibrations[0]
        if not results.levels:
            raise UsageError(f"{name}: the results file has no levels to plan from")
        return plan_from_results(results, request)
    if inputs.law is None:
        raise UsageError("give a RESULTS file to plan from, --law for a what-if, or --variant for a fleet")
    if request.qps and not request.output_tokens:
        raise UsageError("--qps needs --output-tokens in what-if mode")
    return plan_from_law(inputs.law, request)


def _mix(calibrations: Sequence[tuple[str, Results]], request: PlanRequest) -> CapacityPlan:
    """The plan for a mix not measured from several calibration sweeps, or a one-line error saying why not."""
    if request.length_sample is None and (request.prompt_tokens is None or request.output_tokens is None):
        raise UsageError(
            "several RESULTS plan for a mix not measured: give --prompt-tokens and --output-tokens, or --dataset"
        )
    for name, calibration in calibrations:
        if not calibration.levels:
            raise UsageError(f"{name}: the results file has no levels to plan from")
    try:
        return plan_for_mix(calibrations, request)
    except ValueError as exc:
        raise UsageError(f"the calibration ({', '.join(n for n, _ in calibrations)}): {exc}") from None


def dataset_sample(
    dataset: DatasetWords, calibrations: Sequence[tuple[str, Results]], output_tokens: float | None
) -> LengthSample:
    """Each dataset entry's prompt and output in tokens: words times the tokens per word (default: the
    calibration probe's rate, and its template overhead for the prompt); the output is ``output_tokens``
    when given, else the entry's max_tokens, else its recorded answer."""
    rates = [c for _, r in calibrations if (c := r.settings.prompt_calibration)]
    if dataset.tokens_per_word is None and not rates:
        raise UsageError(
            f"--dataset {dataset.name}: the calibration files hold no prompt calibration; give --tokens-per-word"
        )
    per_word = dataset.tokens_per_word or float(np.mean([c["tokens_per_word"] for c in rates]))
    overhead = float(np.mean([c["overhead_tokens"] for c in rates])) if dataset.tokens_per_word is None else 0.0
    outputs = []
    for answer, max_tokens in zip(dataset.answer_words, dataset.max_tokens):
        out = output_tokens or max_tokens or (answer and max(1, round(answer * per_word)))
        if not out:
            raise UsageError(
                f"--dataset {dataset.name}: an entry has no max_tokens and no recorded answer; give --output-tokens"
            )
        outputs.append(round(out))
    prompts = np.maximum(0.0, overhead + per_word * np.asarray(dataset.prompt_words, dtype=np.float64))
    how = "--tokens-per-word" if dataset.tokens_per_word is not None else "the calibration probe's, on synthetic words"
    source = f"{dataset.name} ({len(outputs):,} entries; words x {per_word:.3g} tokens/word, {how})"
    return LengthSample(prompts, np.asarray(outputs, dtype=np.int64), source)


def _predicted(
    calibrations: Sequence[tuple[str, Results]], forecast: MixForecast, levels: tuple[int, ...], request: PlanRequest
) -> PredictedSweep:
    """The levels ``levels`` at the forecast's mix (requests drawn from the dataset's lengths where given),
    served by its fitted engine, batch capped at the current batch where given (see ``planner.capacity.predicted``)."""
    if forecast.engine is None:
        raise UsageError(f"--predict-levels: {forecast.model.separation_note() or 'the calibration fitted no engine'}")
    budget = forecast.model.budget
    seqs = request.current_batch or max(forecast.engine.max_num_seqs, max(levels))
    if budget is not None and budget < seqs:
        raise UsageError(
            f"--max-num-batched-tokens {budget}: below the batch cap {seqs}; give at least one token a sequence"
        )
    engine = dataclasses.replace(
        forecast.engine,
        max_num_seqs=seqs,
        max_num_batched_tokens=closed_loop_budget(budget, seqs, forecast.mix.prompt_tokens),
        kv_capacity_tokens=forecast.kv_capacity_tokens,  # known: a sequence waits for room, as on the server
    )
    p95 = forecast.tpot_p95
    if p95 is None and absent_statistic(calibrations, 95.0) is None:
        p95 = fit_calibration(calibrations, 95.0, budget, request.seed)
    lengths = predicted_lengths(calibrations, forecast.mix, request.length_sample)
    return predict_levels(forecast, engine, lengths, levels, p95)


def _replayed(capacity: CapacityPlan, inputs: PlanInputs) -> tuple[ReplayCheck, ...]:
    """Each measured level replayed through the engine the plan's sizing simulation runs (and corrected for
    each TTFT or E2E SLO asked)."""
    if capacity.engine is None:
        raise UsageError(
            f"--validate {inputs.validation_source}: the plan has no batch to run its engine at: give --current-batch "
            "(the server's --max-num-seqs) or an SLO that bounds the batch"
        )
    checks = []
    for level in inputs.validation:
        check = replay_check(
            capacity.engine,
            level.label,
            level.sent_s,
            level.prompt_tokens,
            level.output_tokens,
            level.ttft_ms,
            level.e2e_ms,
            slos=inputs.request.slos,
            send_lag_ms=level.send_lag_ms,
        )
        if level.skipped:
            left_out = f"{level.skipped} completed requests had no prompt length (the server sent no usage): left out"
            check = dataclasses.replace(check, note=f"{check.note}; {left_out}")
        checks.append(check)
    return tuple(checks)


def _fleet(fleet: FleetInputs, request: PlanRequest) -> FleetPlan:
    """Each variant planned under the request's SLOs and its mu_slo found, then the fleets over the demand."""
    capacities = []
    for v in fleet.variants:
        variant_request = PlanRequest(
            slos=request.slos,
            output_tokens=request.output_tokens,
            max_utilization=request.max_utilization,
            seed=request.seed,
            queueing_simulated=True,
        )
        plan = plan_from_results(v.results, variant_request)
        output = request.output_tokens or (plan.observations.output_tokens_mean if plan.observations else None)
        if not output:
            raise UsageError(f"--variant {v.spec!r}: {v.source} holds no output length; give --output-tokens")
        prompt = plan.prefill.prompt_tokens if plan.prefill else 0.0
        variant = Variant(
            name=v.name,
            plan=plan,
            output_tokens=output,
            prompt_tokens=prompt,
            source=v.source,
            cost_per_gpu_hour=v.cost_per_gpu_hour,
            gpus=v.gpus,
        )
        capacities.append(
            variant_capacity(
                variant,
                request.slos,
                max_utilization=request.max_utilization,
                arrival=request.arrival,
                burstiness=request.burstiness,
                seed=request.seed,
            )
        )
    try:
        return plan_fleet(
            fleet.demand,
            capacities,
            request.slos,
            scale_up_s=fleet.scale_up_s,
            spare=fleet.spare,
            mix=fleet.mix,
            max_utilization=request.max_utilization,
            seed=request.seed,
        )
    except ValueError as exc:
        raise UsageError(f"--variant: {exc}") from None
