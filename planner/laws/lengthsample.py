"""A length distribution to plan for: each request's prompt and output tokens, from a dataset (pure).

The step model is linear in what a step holds, so a distribution enters it through three means
taken the way steps see them: prompt tokens prefilled per sequence-step (sum P / sum O), and KV
context per sequence-step, where a request holds its context for each of its O steps
(sum (O*P + O*(O-1)/2) / sum O). The sizing simulation draws whole requests from the sample, so
its tails are the distribution's, not the means'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.choices import LengthDist
from loadgen.lengths import Lengths
from planner.laws.lengthmodel import Mix

SHAPE_DRAWS = 4096  # requests drawn to stand for a run's length distribution


@dataclass(frozen=True, slots=True, eq=False)
class LengthSample:
    """Prompt and output tokens of each request of a dataset, and where the counts came from."""

    prompt_tokens: np.ndarray  # float, >= 0
    output_tokens: np.ndarray  # int, >= 1
    source: str  # e.g. "prompts.jsonl (1,000 entries; words x 1.31 tokens/word, the calibration's)"

    def __post_init__(self) -> None:
        if len(self.prompt_tokens) != len(self.output_tokens) or not len(self.output_tokens):
            raise ValueError("a length sample needs one prompt and one output length per request, and a request")
        if np.min(self.output_tokens) < 1 or np.min(self.prompt_tokens) < 0:
            raise ValueError("every request needs an output token and a prompt of zero tokens or more")

    @classmethod
    def fixed(cls, prompt_tokens: float, output_tokens: float) -> LengthSample:
        """Every request alike, at a mix's means (rounded as a request's lengths are)."""
        return cls(
            np.array([max(round(prompt_tokens), 0)], dtype=np.float64),
            np.array([max(round(output_tokens), 1)], dtype=np.int64),
            f"fixed, prompt {prompt_tokens:.0f} / output {output_tokens:.0f}",
        )

    @classmethod
    def shaped(
        cls, mix: Mix, prompt: Mapping[str, Any] | None, output: Mapping[str, Any] | None, seed: int = 0
    ) -> LengthSample:
        """The distributions a run asked for (``{"mean", "dist", "spread"}``, as results record them; None or
        fixed: the mean alone), each scaled to ``mix``'s mean: a run's shape at another mix's means."""
        if not (_varies(prompt) or _varies(output)):
            return cls.fixed(mix.prompt_tokens, mix.output_tokens)
        rng = np.random.default_rng(seed)
        prompts = _scaled(prompt, mix.prompt_tokens, rng)
        outputs = np.maximum(np.round(_scaled(output, mix.output_tokens, rng)), 1).astype(np.int64)
        shape = ", ".join(f"{name} {_shape_text(spec)}" for name, spec in (("prompt", prompt), ("output", output)))
        return cls(np.maximum(np.round(prompts), 0), outputs, f"the calibration's shape at these means ({shape})")

    @property
    def mix(self) -> Mix:
        """The sample as the step model sees it: mean lengths, with context weighted by each request's steps."""
        p, o = self.prompt_tokens.astype(np.float64), self.output_tokens.astype(np.float64)
        steps = float(o.sum())
        context = float((o * p + o * (o - 1) / 2).sum()) / steps
        return Mix(float(p.mean()), float(o.mean()), context=context)

    @property
    def varies(self) -> bool:
        """Whether its requests differ in length (a fixed sample is its means, and is simulated as them)."""
        return bool(np.ptp(self.prompt_tokens) > 0 or np.ptp(self.output_tokens) > 0)

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` requests drawn with replacement: (prompt tokens, output tokens)."""
        picks = rng.integers(0, len(self.output_tokens), n)
        return self.prompt_tokens[picks], self.output_tokens[picks]


def shape_of(spec: Mapping[str, Any] | None) -> tuple[str, float]:
    """A recorded length's distribution apart from its mean: ``("fixed", 0.0)`` when it does not vary."""
    return (str(spec["dist"]), float(spec["spread"])) if spec is not None and _varies(spec) else ("fixed", 0.0)


def _varies(spec: Mapping[str, Any] | None) -> bool:
    return spec is not None and spec.get("dist", LengthDist.FIXED) != LengthDist.FIXED and spec.get("spread", 0) > 0


def _scaled(spec: Mapping[str, Any] | None, mean: float, rng: np.random.Generator) -> np.ndarray:
    """``SHAPE_DRAWS`` draws of ``spec``'s distribution, scaled from its mean to ``mean``."""
    if spec is None or not _varies(spec):
        return np.full(SHAPE_DRAWS, float(mean))
    lengths = Lengths(int(spec["mean"]), LengthDist(spec["dist"]), float(spec["spread"]))
    draws = np.array([lengths.draw(rng) for _ in range(SHAPE_DRAWS)], dtype=np.float64)
    return draws * (mean / lengths.mean)


def _shape_text(spec: Mapping[str, Any] | None) -> str:
    dist, spread = shape_of(spec)
    return f"{dist} spread {spread:g}" if spread else "fixed"
