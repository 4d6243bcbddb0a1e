"""The prefill a plan's steps carry: the term, where it came from, and the decode step left beside it (pure).

One step law (docs/design.md): a law fitted on a sweep's TPOT holds prefill's share of each step on
average; the sizing simulation runs the decode step and charges prefill per admitted prompt, so prefill
is counted once either way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from planner.evidence.observations import Observations
from planner.laws.lengthmodel import IDLE_CONCURRENCY, ttft_at_idle
from planner.laws.stepmodel import StepModel, prefill_share_ms


@dataclass(frozen=True, slots=True)
class Prefill:
    """The prefill a step that admits prompts pays, and where it came from.

    One step law (docs/design.md): a running sequence's prompt is prefilled once in its
    ``output_tokens`` steps, so the mean step at batch b is the decode law plus
    ``b * per_seq_ms(output_tokens)``. A law fitted on a sweep's TPOT already holds that
    share; a law stated by hand does not.
    """

    ms_per_token: float
    prompt_tokens: float
    source: str  # "--prefill-ms-per-token", "fitted from TTFT at c=1", or why there is none

    def per_seq_ms(self, output_tokens: float | None) -> float:
        """Prefill's share of the mean step per running sequence (0 without a term or an output length)."""
        return prefill_share_ms(self.ms_per_token, self.prompt_tokens, output_tokens)


def estimate_prefill(
    obs: Observations, fit: StepModel | None, prompt_tokens: float | None, given_ms_per_token: float | None
) -> tuple[Prefill, float]:
    """The prefill term, and its share of the fitted slope (ms per running sequence per step).

    As given (``given_ms_per_token``), else what a concurrency-1 level's TTFT holds beyond one step. At concurrency 1 a
    request arrives at an idle engine, so its TTFT (from sent; a closed loop's TTFT is the same) is
    the decode step of batch 1 plus its whole prompt's prefill (and the network's round trip, which
    this counts as prefill: the conservative side). The fitted step(1) already holds prefill's share
    P/O of that prompt, so the difference is P * (1 - 1/O) of prefill.
    """
    prompt = prompt_tokens or obs.prompt_tokens_mean or 0.0
    swept_prompt, swept_output = obs.prompt_tokens_mean or 0.0, obs.output_tokens_mean
    if given_ms_per_token is not None:
        given = Prefill(given_ms_per_token, prompt, "--prefill-ms-per-token")
        return given, Prefill(given.ms_per_token, swept_prompt, given.source).per_seq_ms(swept_output)
    single = next(
        (
            (lv.label, ttft, level.tokens_per_gap)
            for lv, level in zip(obs.levels, obs.results)
            if lv.concurrency < IDLE_CONCURRENCY and (ttft := ttft_at_idle(level)) is not None
        ),
        None,
    )
    if single is None:
        return Prefill(0.0, prompt, "none: no level ran at concurrency 1 (give --prefill-ms-per-token)"), 0.0
    if fit is None or not swept_prompt:
        why = "no step law was fitted" if fit is None else "the sweep's prompt length is unknown"
        return Prefill(0.0, prompt, f"none: {why} (give --prefill-ms-per-token)"), 0.0
    label, ttft, per_step = single
    held = 1 - 1 / swept_output if swept_output and swept_output > 1 else 1.0
    # the first token comes at the end of a whole step: where a step verifies several tokens (speculative
    # decoding), that step is the per-token law times the tokens it emits
    per_token = max(ttft - float(fit.step_ms(1)) * per_step, 0.0) / (swept_prompt * held)
    fitted = Prefill(per_token, prompt, f"fitted from TTFT at {label}")
    return fitted, Prefill(per_token, swept_prompt, fitted.source).per_seq_ms(swept_output)


def decode_law(fit: StepModel, prefill: Prefill, share: float, warnings: list[str]) -> tuple[StepModel, Prefill]:
    """The decode step a fitted law holds beside prefill's ``share``, so the simulation counts prefill once.

    A share larger than the fitted slope means the prefill estimate (from TTFT at c=1, which also
    holds the network's round trip) overstates it: it is cut to what the slope holds, and said.
    """
    if share <= 0:
        return fit, prefill
    if fit.per_seq_ms <= 0 or fit.base_ms <= 0:
        # with no base, the slope is all the step there is: taking prefill's share out leaves no decode
        what = "no slope" if fit.per_seq_ms <= 0 else "no base above zero"
        warnings.append(
            f"the fitted law has {what} to hold prefill apart: the simulation counts no separate prefill "
            "(the law's slope holds it on average)"
        )
        return fit, dataclasses.replace(prefill, ms_per_token=0.0)
    if share > fit.per_seq_ms:
        scaled = prefill.ms_per_token * fit.per_seq_ms / share
        warnings.append(
            f"prefill {prefill.ms_per_token:.3g} ms/token ({prefill.source}) is more than the fitted slope holds; "
            f"the simulation uses {scaled:.3g}"
        )
        prefill, share = dataclasses.replace(prefill, ms_per_token=scaled), fit.per_seq_ms
    return fit.plus_per_seq(-share), prefill
