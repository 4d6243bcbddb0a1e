"""Traffic split over several model names behind one endpoint: the LoRA adapters of multi-LoRA serving.

One endpoint often serves a base model and many adapters (vLLM's
``--lora-modules``); each request names one in ``model``. A mix states the
names with weights (``sql=70,chat=20,base=10``), or names ranked by
popularity under a Zipf law (weight of the k-th name ~ 1 / k^s), which is how
adapter popularity usually falls off. Each request draws its model from the
level's seed, so a rerun sends the same split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_MODELS = 1024
MAX_NAME = 256


@dataclass(frozen=True, slots=True)
class ModelMix:
    """Model names and the share of requests each gets (shares sum to 1)."""

    names: tuple[str, ...]
    shares: tuple[float, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.names) <= MAX_MODELS or len(self.shares) != len(self.names):
            raise ValueError(f"expected 1 to {MAX_MODELS} model names, each with a share")
        if len(set(self.names)) != len(self.names):
            raise ValueError("each model name once")
        if any(not name or len(name) > MAX_NAME for name in self.names):
            raise ValueError(f"model names are 1 to {MAX_NAME} characters")
        if any(not (math.isfinite(s) and s > 0) for s in self.shares) or abs(sum(self.shares) - 1) > 1e-9:
            raise ValueError("shares must be positive and sum to 1")

    @classmethod
    def weighted(cls, weights: dict[str, float]) -> ModelMix:
        total = sum(weights.values())
        if not (math.isfinite(total) and total > 0) or any(not (w > 0) for w in weights.values()):
            raise ValueError("each weight must be a positive number")
        return cls(tuple(weights), tuple(w / total for w in weights.values()))

    @classmethod
    def zipf(cls, names: tuple[str, ...], exponent: float) -> ModelMix:
        """The k-th name (from 1) weighted 1 / k^exponent: 0 is uniform, ~1 is typical adapter popularity."""
        if not (math.isfinite(exponent) and 0 <= exponent <= 10):
            raise ValueError(f"a Zipf exponent is from 0 to 10, got {exponent}")
        if len(set(names)) != len(names):
            raise ValueError("each model name once")
        return cls.weighted({name: 1.0 / (k + 1) ** exponent for k, name in enumerate(names)})

    def draw(self, rng: np.random.Generator) -> str:
        return self.names[int(np.searchsorted(self._cumulative, rng.random(), side="right"))]

    @property
    def _cumulative(self) -> np.ndarray:
        edges = np.cumsum(self.shares)
        edges[-1] = 1.0 + 1e-12  # a draw of 1 - 2^-53 past a rounded total still lands on the last name
        return edges

    def describe(self) -> str:
        return ", ".join(f"{name} {share:.0%}" for name, share in zip(self.names, self.shares))


def parse_model_mix(text: str, zipf: float | None = None) -> ModelMix:
    """``--models``: ``a=70,b=20,c=10`` (weights), or ``a,b,c`` (equal, or ranked under ``--models-zipf``)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError("expected NAME[=WEIGHT],... e.g. sql=70,chat=20,base=10")
    weighted = [p.partition("=") for p in parts]
    if any(sep for _, sep, _ in weighted):
        if zipf is not None:
            raise ValueError("weights or a Zipf exponent, not both")
        if not all(sep for _, sep, _ in weighted):
            raise ValueError("give every name a weight, or none")
        weights: dict[str, float] = {}
        for name, _, raw in weighted:
            try:
                weights[name.strip()] = float(raw)
            except ValueError:
                raise ValueError(f"{name.strip()}={raw}: a weight is a positive number") from None
        if len(weights) != len(weighted):
            raise ValueError("each model name once")
        return ModelMix.weighted(weights)
    return ModelMix.zipf(tuple(parts), zipf or 0.0)
