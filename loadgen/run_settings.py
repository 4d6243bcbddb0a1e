"""The resolved configuration a results file stores beside its levels, typed (part of the results contract).

Every reader takes attributes, never string keys, and ``from_json`` holds, once, the defaults that
files written before a key existed imply (a file without ``metric_convention`` timed text chunks; one
without ``start`` started staggered). Keys this module does not read (headers, transport, timeouts,
each level's plan, ...) are kept verbatim in ``other`` and written back as they were, so nothing a
newer loadgen stored is lost by an older reader's round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    """What a run was asked to do, as stored (secrets removed before it is built)."""

    api: str | None = None
    model: str | None = None
    prompt_tokens: Mapping[str, Any] | None = None  # the length asked ({"mean", "dist", "spread"}); None: per request
    output_tokens: Mapping[str, Any] | None = None
    dataset_prompts: int | None = None
    output_from_dataset: bool = False
    unique_prompts: bool | None = None
    images: Mapping[str, Any] | None = None  # each request's images: {"count", "width", "height", "folder"}
    models: Mapping[str, float] | None = None  # requests split over model names (adapters): name -> share
    metric_convention: str = "text"  # files before the convention existed timed text chunks
    prompt_calibration: Mapping[str, float] | None = None  # {"overhead_tokens", "tokens_per_word"}
    start: str = "staggered"  # how closed-loop clients started
    retries: int = 0  # --retries: attempts beyond the first a level was allowed
    extra_body: Mapping[str, Any] | None = None
    event_loop: str | None = None
    virtual_time: bool = False
    profile: Mapping[str, Any] | None = None  # the profile a sweep ran with, as it serialises
    trace: Mapping[str, Any] | None = None  # a replayed trace: {"file", "format", "requests", "span_s"}
    imported: Mapping[str, Any] | None = None  # levels imported from another tool: {"source", "format", "note"}
    other: Mapping[str, Any] = field(default_factory=dict)  # every other key, verbatim

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RunSettings:
        """From a results file's ``settings`` (ValueError/TypeError on a value of the wrong type)."""
        known = {f.name for f in fields(cls)} - {"other"}
        typed = {k: v for k, v in raw.items() if k in known and v is not None}
        for key in ("output_from_dataset", "virtual_time"):
            if key in typed:
                typed[key] = bool(typed[key])
        if "retries" in typed:
            typed["retries"] = int(typed["retries"])
            if typed["retries"] < 0:
                raise ValueError(f"settings.retries must be >= 0, got {typed['retries']}")
        for key in (
            "prompt_tokens",
            "output_tokens",
            "prompt_calibration",
            "extra_body",
            "profile",
            "trace",
            "imported",
            "images",
            "models",
        ):
            if key in typed and not isinstance(typed[key], Mapping):
                raise TypeError(f"settings.{key} must be an object, got {typed[key]!r}")
        return cls(**typed, other={k: v for k, v in raw.items() if k not in known})

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "other"}
        return {**{k: dict(v) if isinstance(v, Mapping) else v for k, v in out.items()}, **self.other}

    @property
    def prompt_mean(self) -> float | None:
        """The mean prompt length asked, in tokens (None: per request, from a dataset or a trace)."""
        return _mean(self.prompt_tokens)

    @property
    def output_mean(self) -> float | None:
        return _mean(self.output_tokens)

    @property
    def profile_name(self) -> str | None:
        name = (self.profile or {}).get("name")
        return str(name) if name is not None else None

    def profile_section(self, key: str) -> Mapping[str, Any]:
        """A section of the stored profile (``slo``, ``gate``, ``plan``, ``load``), empty when absent."""
        section = (self.profile or {}).get(key)
        return section if isinstance(section, Mapping) else {}

    def fingerprint(self) -> dict[str, Any]:
        """The settings that decide what was measured, for comparability (``Results.workload_fingerprint``)."""
        return {
            "prompt_tokens": None if self.prompt_tokens is None else dict(self.prompt_tokens),
            "dataset_prompts": self.dataset_prompts,
            "output_tokens": None if self.output_tokens is None else dict(self.output_tokens),
            "output_from_dataset": self.output_from_dataset,
            "unique_prompts": self.unique_prompts,
            "images": None if self.images is None else dict(self.images),
            "models": None if self.models is None else dict(self.models),
            "metric_convention": self.metric_convention,
            "extra_body": None if self.extra_body is None else dict(self.extra_body),
        }


def _mean(lengths: Mapping[str, Any] | None) -> float | None:
    value = (lengths or {}).get("mean")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
