"""A length distribution to plan for: each request's prompt and output tokens, from a dataset (pure).

The step model is linear in what a step holds, so a distribution enters it through three means
taken the way steps see them: prompt tokens prefilled per sequence-step (sum P / sum O), and KV
context per sequence-step, where a request holds its context for each of its O steps
(sum (O*P + O*(O-1)/2) / sum O). The sizing simulation draws whole requests from the sample, so
its tails are the distribution's, not the means'.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.lengthmodel import Mix


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

    @property
    def mix(self) -> Mix:
        """The sample as the step model sees it: mean lengths, with context weighted by each request's steps."""
        p, o = self.prompt_tokens.astype(np.float64), self.output_tokens.astype(np.float64)
        steps = float(o.sum())
        context = float((o * p + o * (o - 1) / 2).sum()) / steps
        return Mix(float(p.mean()), float(o.mean()), context=context)

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` requests drawn with replacement: (prompt tokens, output tokens)."""
        picks = rng.integers(0, len(self.output_tokens), n)
        return self.prompt_tokens[picks], self.output_tokens[picks]
