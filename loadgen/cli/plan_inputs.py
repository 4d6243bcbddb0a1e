"""From a command's flags to the planner's question (``planner.PlanInputs``): the files read, the flags
checked, and the one precedence rule applied (``loadgen.inputs.plan_layers``).

``plan``, ``report`` and ``sweep``'s headline all build their question here, so they answer it alike.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadgen.choices import SIMULATED_ARRIVALS, Arrival
from loadgen.cli.bounds import bounded
from loadgen.cli.common import choice
from loadgen.cli.fleet_cmd import demand_of, read_variants
from loadgen.errors import UsageError
from loadgen.inputs.measured import read_measured
from loadgen.inputs.plan_layers import DEFAULTS, PlanLayer, profile_layer, resolve, stored_layer
from loadgen.inputs.profile import Profile, find_profile, load_profile
from loadgen.inputs.workload import DatasetFormat, entry_words, load_dataset
from loadgen.limits import MAX_FLEET_RPS, MAX_TOKENS
from loadgen.results import Results, load
from loadgen.slo_target import SloTarget
from planner import PlanInputs, PlanRequest, StepModel, parse_slo
from planner.front_door import DatasetWords, FleetInputs, FleetVariant

MAX_PREDICTED_CONCURRENCY = 1024  # a predicted level runs in virtual time: bounded work
_LAW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*\+\s*(\d+(?:\.\d+)?)\s*\*?\s*b\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanFlags:
    """Every flag that shapes a plan, as ``plan`` and ``report`` take them (None or empty: not given)."""

    results_files: list[Path] | None = None
    law: str | None = None
    slo: list[str] | None = None
    profile: str | None = None
    qps: float | None = None
    output_tokens: float | None = None
    max_utilization: float | None = None
    current_batch: int | None = None
    replicas: int | None = None
    arrival: str = Arrival.POISSON
    burstiness: float = 1.0
    lengths: str | None = None
    no_simulate: bool = False
    seed: int | None = None
    prefill_ms_per_token: float | None = None
    prompt_tokens: float | None = None
    dataset: Path | None = None
    dataset_format: DatasetFormat = DatasetFormat.AUTO
    tokens_per_word: float | None = None
    max_num_batched_tokens: int | None = None
    kv_capacity_tokens: int | None = None
    predict_levels: str | None = None
    validate: Path | None = None
    variant: list[str] | None = None
    traffic: Path | None = None
    bucket: str = "60s"
    scale_up_s: float = 0.0
    spare: int = 0
    mix: bool = False


def parse_law(text: str) -> StepModel:
    m = _LAW.match(text)
    if not m:
        raise UsageError(f"--law {text!r}: expected BASE+SLOPEb in ms, e.g. 25+0.4b")
    return StepModel.given(float(m.group(1)), float(m.group(2)))


def parse_slos(texts: list[str]) -> tuple[SloTarget, ...]:
    try:
        return tuple(parse_slo(t) for t in texts)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def parse_lengths(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        lengths = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--lengths {text!r}: expected positive integers separated by commas") from None
    if not lengths or min(lengths) < 1:
        raise UsageError(f"--lengths {text!r}: expected positive integers separated by commas")
    return lengths


def parse_levels(text: str | None) -> tuple[int, ...]:
    if text is None:
        return ()
    try:
        levels = tuple(int(x) for x in text.split(","))
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1 or max(levels) > MAX_PREDICTED_CONCURRENCY:
        raise UsageError(
            f"--predict-levels {text!r}: expected concurrencies from 1 to {MAX_PREDICTED_CONCURRENCY} "
            "separated by commas, e.g. 1,8,16"
        )
    return levels


def require_mix(files: int, **flags: object) -> None:
    """A one-line error where flags that only a mix plan reads (``None``: not given) come with one RESULTS."""
    given = ["--" + name.replace("_", "-") for name, value in flags.items() if value is not None]
    if given and files < 2:
        raise UsageError(f"{', '.join(given)}: for a mix plan: give two or more RESULTS")


def read_plan_inputs(flags: PlanFlags, check_sources: Callable[[PlanFlags], None]) -> PlanInputs:
    """The question ``flags`` ask: the command's ``check_sources`` passed (with a --profile's fleet as its
    --variant), then their files read (results, variants, a dataset, records) and checked."""
    prof = load_profile(find_profile(flags.profile)) if flags.profile is not None else None
    if prof is not None and not flags.variant and not flags.results_files and flags.law is None:
        flags = dataclasses.replace(flags, variant=list(prof.plan.variants) or None)  # the profile's fleet
    check_sources(flags)
    variants = read_variants(flags.variant) if flags.variant else []
    calibrations = [(path.name, load(path)) for path in flags.results_files or []]
    return assemble(flags, calibrations, variants, prof)


def assemble(
    flags: PlanFlags,
    calibrations: list[tuple[str, Results]],
    variants: list[FleetVariant] | None = None,
    prof: Profile | None = None,
) -> PlanInputs:
    """The question from evidence already read: the precedence rule over the first file's stored profile
    (the first variant's, for a fleet), ``prof`` and ``flags``, then every flag checked by name."""
    layer = _layers(flags, calibrations or [(v.source, v.results) for v in variants or []], prof)
    assert layer.max_utilization is not None and layer.seed is not None  # DEFAULTS states both
    qps = flags.qps if flags.traffic is not None else layer.qps  # a traffic series is the demand
    request = PlanRequest(
        slos=layer.slos,
        qps=qps,
        output_tokens=layer.output_tokens,
        max_utilization=layer.max_utilization,
        current_batch=flags.current_batch,
        current_replicas=flags.replicas,
        arrival=choice("--arrival", flags.arrival, SIMULATED_ARRIVALS),
        burstiness=flags.burstiness,
        lengths=parse_lengths(flags.lengths),
        simulate=not flags.no_simulate,
        seed=layer.seed,
        prefill_ms_per_token=flags.prefill_ms_per_token,
        prompt_tokens=flags.prompt_tokens,
        token_budget=flags.max_num_batched_tokens,
        kv_capacity_tokens=flags.kv_capacity_tokens,
    )
    _check_bounds(flags, request)
    if variants:
        fleet = FleetInputs(
            variants=tuple(variants),
            demand=demand_of(flags.traffic, qps, flags.bucket),
            scale_up_s=flags.scale_up_s,
            spare=flags.spare,
            mix=flags.mix,
        )
        return PlanInputs(request=request, fleet=fleet)
    require_mix(
        len(calibrations),
        dataset=flags.dataset,
        max_num_batched_tokens=flags.max_num_batched_tokens,
        kv_capacity_tokens=flags.kv_capacity_tokens,
        predict_levels=flags.predict_levels,
    )
    return PlanInputs(
        request=request,
        calibrations=tuple(calibrations),
        law=parse_law(flags.law) if flags.law is not None else None,
        dataset=_dataset_words(flags) if flags.dataset is not None else None,
        predict_levels=parse_levels(flags.predict_levels),
        validation=tuple(read_measured(flags.validate)) if flags.validate is not None else (),
        validation_source=str(flags.validate or ""),
    )


def _layers(flags: PlanFlags, evidence: list[tuple[str, Results]], prof: Profile | None) -> PlanLayer:
    """defaults < the stored profile of the first evidence file < --profile < flags."""
    said = PlanLayer(
        slos=parse_slos(flags.slo or []),
        qps=flags.qps,
        output_tokens=flags.output_tokens,
        max_utilization=flags.max_utilization,
        seed=flags.seed,
    )
    above = profile_layer(prof) if prof is not None else PlanLayer()
    stored = PlanLayer()
    if evidence:
        name, results = evidence[0]
        stored = stored_layer(results.settings, name, slos=not (said.slos or above.slos))
    return resolve(DEFAULTS, stored, above, said)


def _check_bounds(flags: PlanFlags, request: PlanRequest) -> None:
    """Each numeric flag (or the value a profile gave it) within its range, or one line naming the flag."""
    for flag, value, low, exclusive, high in (
        ("--max-utilization", request.max_utilization, 0, True, 1),
        ("--qps", request.qps, 0, True, MAX_FLEET_RPS),
        ("--output-tokens", request.output_tokens, 0, True, MAX_TOKENS),
        ("--burstiness", flags.burstiness, 0, True, None),
        ("--current-batch", flags.current_batch, 1, False, None),
        ("--replicas", flags.replicas, 0, False, None),
        ("--prefill-ms-per-token", flags.prefill_ms_per_token, 0, False, None),
        ("--prompt-tokens", flags.prompt_tokens, 0, False, MAX_TOKENS),
        ("--tokens-per-word", flags.tokens_per_word, 0, True, None),
        ("--max-num-batched-tokens", flags.max_num_batched_tokens, 1, False, MAX_TOKENS),
        ("--kv-capacity-tokens", flags.kv_capacity_tokens, 1, False, None),
        ("--scale-up-s", flags.scale_up_s, 0, False, None),
        ("--spare", flags.spare, 0, False, None),
    ):
        bounded(flag, value, minimum=low, exclusive=exclusive, maximum=high)


def _dataset_words(flags: PlanFlags) -> DatasetWords:
    """``--dataset`` read as ``run --dataset`` reads it: each entry's prompt and answer in words."""
    assert flags.dataset is not None
    prompts, answers, max_tokens = [], [], []
    for entry in load_dataset(flags.dataset, flags.dataset_format):
        words, answer = entry_words(entry)
        prompts.append(words)
        answers.append(answer)
        max_tokens.append(entry.max_tokens)
    return DatasetWords(
        name=flags.dataset.name,
        prompt_words=tuple(prompts),
        answer_words=tuple(answers),
        max_tokens=tuple(max_tokens),
        tokens_per_word=flags.tokens_per_word,
    )
