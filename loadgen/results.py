"""The results file: the contract between the load generator and the planner.

Pure (json + histograms): the planner imports it. One versioned JSON schema,
written atomically, readable by every later version. Histograms are the
source of truth; each level's ``summary`` block is for humans and ``jq``: it
is written, never read back (``from_json`` re-derives it), so there are
never two truths. A level's record is ``loadgen.level.result``; this module is
the file around the levels: the run, the target, the settings, the retries.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from loadgen.errors import MissingResultsFile, ResultsError, SchemaVersionError, parse_json
from loadgen.histogram import DEFAULT_CONFIG, HistogramConfig
from loadgen.level.aggregates import duplicate_load
from loadgen.level.result import LevelResult
from loadgen.limits import MAX_FILE_LEVELS
from loadgen.run_settings import RunSettings

TUNE_KIND: Final = "loadgen-tune"  # what ``loadgen tune`` writes (``loadgen.run.tune_record``): trials, not levels
SCHEMA: Final = "loadgen.results"
SCHEMA_VERSION: Final = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo:
    id: str
    started_at: str  # UTC ISO 8601
    tool_version: str
    python: str
    platform: str
    cpu_count: int | None
    command: str  # run | sweep


@dataclass(frozen=True, slots=True)
class Target:
    base_url: str  # credentials, query and fragment stripped
    model: str
    api: str


@dataclass(frozen=True, slots=True)
class RetriedLevel:
    """An attempt at a level that was measured again (``--retries``), kept with why it did not count."""

    attempt: int
    reason: str  # the trust problems of the measurement (the client, the window) that made it not count
    level: LevelResult

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "reason": self.reason, "level": self.level.to_json()}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], config: HistogramConfig) -> RetriedLevel:
        return cls(int(raw["attempt"]), str(raw["reason"]), LevelResult.from_json(raw["level"], config))


@dataclass(frozen=True, slots=True, kw_only=True)
class Results:
    """A run or a sweep: its levels plus everything needed to reproduce it (no secrets)."""

    run: RunInfo
    target: Target
    settings: RunSettings  # the resolved configuration, secrets removed
    levels: tuple[LevelResult, ...]
    complete: bool  # False when interrupted: the levels present are still valid
    histogram_config: HistogramConfig = field(default=DEFAULT_CONFIG)
    notes: tuple[str, ...] = ()  # why a sweep stopped early, and similar
    retried: tuple[RetriedLevel, ...] = ()  # attempts measured again, in the order they ran

    @property
    def pooling(self) -> bool:
        """An embeddings or rerank run: latency and inputs/s to read, nothing for the planner to size."""
        return any(lv.pooling for lv in self.levels)

    def workload_fingerprint(self) -> dict[str, Any]:
        """What was measured, as far as comparability goes: API, model, lengths, convention, load mode."""
        kinds = sorted({lv.load.kind for lv in self.levels})
        arrivals = sorted(
            {(lv.load.arrival, lv.load.burstiness) for lv in self.levels if lv.load.kind == "rate"}, key=str
        )
        return {
            "api": self.target.api,
            "model": self.target.model,
            **self.settings.fingerprint(),
            "start": self.settings.start if "concurrency" in kinds else None,
            "load_mode": "/".join("closed" if k == "concurrency" else "open" for k in kinds),
            "arrival": [f"{a} (burstiness {b:g})" if b is not None else str(a) for a, b in arrivals] or None,
        }

    def to_json(self) -> str:
        doc = {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "run": {k: getattr(self.run, k) for k in RunInfo.__slots__},
            "target": {k: getattr(self.target, k) for k in Target.__slots__},
            "settings": self.settings.to_json(),
            "histogram_config": self.histogram_config.to_json(),
            "complete": self.complete,
            "notes": list(self.notes),
            "levels": [level.to_json() for level in self.levels],
            "retried": [r.to_json() for r in self.retried],
        }
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "results") -> Results:
        raw = parse_json(text, source, error=ResultsError)
        if isinstance(raw, dict) and raw.get("kind") == TUNE_KIND:
            files = [t.get("results") for t in raw.get("trials") or [] if isinstance(t, dict) and t.get("results")]
            raise ResultsError(
                f"{source}: a `loadgen tune` record, not a results file: each trial's levels are a results file of "
                f"their own ({', '.join(map(str, files[:3])) or 'none was measured'}{', ...' if len(files) > 3 else ''})"
            )
        if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
            raise ResultsError(
                f'{source}: not a loadgen results file (no "schema": "{SCHEMA}"); another tool\'s numbers (vLLM bench '
                "serve, GuideLLM, AIPerf, a per-level table) become one with `loadgen import FILE... -o results.json`"
            )
        version = raw.get("schema_version")
        if not isinstance(version, int) or version < 1:
            raise ResultsError(f"{source}: schema_version must be a positive integer, got {version!r}")
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{source}: written with results schema {version}, this loadgen reads up to {SCHEMA_VERSION}; upgrade loadgen"
            )
        raw = migrate(raw)
        try:
            config = _histogram_config(raw["histogram_config"])
            held = len(raw["levels"]) + len(raw.get("retried") or ())  # a retried attempt is a level too
            if held > MAX_FILE_LEVELS:
                raise ResultsError(f"{source}: {held:,} levels; a results file holds at most "
                                   f"{MAX_FILE_LEVELS:,}")  # fmt: skip
            levels = tuple(LevelResult.from_json(level, config) for level in raw["levels"])
            if (twice := duplicate_load(levels)) is not None:
                raise ResultsError(
                    f"{source}: two levels at {twice}: a results file holds one level per load (a level measured "
                    "again is kept under retried); remove one"
                )
            return cls(
                run=RunInfo(**{k: raw["run"].get(k) for k in RunInfo.__slots__}),
                target=Target(**{k: raw["target"][k] for k in Target.__slots__}),
                settings=RunSettings.from_json(raw.get("settings") or {}),
                levels=levels,
                complete=bool(raw["complete"]),
                histogram_config=config,
                notes=tuple(raw.get("notes", ())),
                retried=tuple(RetriedLevel.from_json(r, config) for r in raw.get("retried") or ()),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise ResultsError(f"{source}: corrupt results file ({type(exc).__name__}: {exc})") from None


MAX_HISTOGRAM_HIGHEST_US = 7 * 86_400 * 10**6  # a week: a latency past it is not one a histogram needs to hold


def _histogram_config(hc: Mapping[str, Any]) -> HistogramConfig:
    """The file's histogram range, within what a latency needs: a range of 2^62 at 5 significant figures
    once allocated gigabytes of buckets before anything was read."""
    config = HistogramConfig(
        unit=hc["unit"],
        lowest=int(hc["lowest"]),
        highest=int(hc["highest"]),
        significant_figures=int(hc["significant_figures"]),
    )
    if config.unit != "us" or not (1 <= config.lowest < config.highest <= MAX_HISTOGRAM_HIGHEST_US):
        raise ValueError(
            f"histogram_config: expected unit us and 1 <= lowest < highest <= {MAX_HISTOGRAM_HIGHEST_US:,}"
        )
    if not 1 <= config.significant_figures <= 3:
        raise ValueError(f"histogram_config: significant_figures must be 1 to 3, got {config.significant_figures}")
    return config


def migrate(raw: dict[str, Any]) -> dict[str, Any]:
    """Bring an older document up to ``SCHEMA_VERSION`` one step at a time (none needed yet)."""
    return raw


def save_atomic(results: Results, path: Path, *, private: bool = False) -> None:
    """Serialise fully, then write it atomically (``write_atomic``)."""
    write_atomic(path, results.to_json(), private=private)


def write_atomic(path: Path, text: str, *, private: bool = False) -> None:
    """Write a temporary file beside ``path``, fsync, then rename over it; a failed write leaves no
    temporary file behind. ``private``: readable by its owner alone (a fallback in a shared folder)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fallback_paths(results: Results, path: Path) -> tuple[Path, ...]:
    """Where a results file goes when ``path`` cannot take it: the system's temporary folder, then home."""
    name = f"loadgen-{results.run.id}-{path.name}"
    return (Path(tempfile.gettempdir()) / name, Path.home() / name)


def save_with_fallback(results: Results, path: Path) -> tuple[Path, str | None]:
    """Save at ``path``, else at the first fallback that takes it: (where it went, why ``path`` failed).

    A measurement is never lost to a full disk or a folder turned read-only after the run began.
    Raises OSError (the first failure's) only when no place could take the file.
    """
    try:
        save_atomic(results, path)
        return path, None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        first = exc
    for other in fallback_paths(results, path):
        try:
            save_atomic(results, other, private=True)
            return other, why
        except OSError:
            continue
    raise first


def load(path: Path) -> Results:
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        raise MissingResultsFile(f"{path}: no such results file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read ({exc})") from None
    return Results.from_json(text, source=str(path))
