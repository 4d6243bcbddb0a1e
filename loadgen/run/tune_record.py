"""What ``loadgen tune`` writes: every trial, predicted against measured, and the configuration it verified.

One JSON file (``kind: loadgen-tune``), rewritten after every trial so an interrupted search keeps what it
measured. Each trial names its configuration, why it was chosen, how the server start went (with the
log's last lines where it did not), the law's prediction at that configuration, what was measured, and
the results file holding its levels (``loadgen plan``, ``report`` and ``compare`` read those as any sweep).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadgen.errors import ResultsError
from loadgen.results import TUNE_KIND


@dataclass(frozen=True, slots=True, kw_only=True)
class Trial:
    """One server start and what was measured on it."""

    number: int
    config: Mapping[str, int]  # each template name the trial set -> its value
    why: str  # why this configuration was measured
    server: str  # ServerOutcome: ready, refused, never_ready
    start_s: float
    verdict: str  # "holds", "fails: ...", "refused", "never ready", "untrusted", "interrupted", "calibration"
    holds: bool | None = None
    predicted_ms: Mapping[str, float] = field(default_factory=dict)  # SLO key -> the law's value at this config
    measured: Mapping[str, float | None] = field(default_factory=dict)  # SLO key -> the trial's measured value
    results: str | None = None  # the results file of its levels
    log: str | None = None
    log_tail: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TuneRecord:
    """The whole search: its question, its trials, and where it stopped."""

    serve_cmd: str
    slos: Mapping[str, float]
    trials: tuple[Trial, ...]
    verified: Mapping[str, int] | None  # the configuration that held, with its next larger cap measured failing
    stopped: str  # why the search ended
    restarts: int  # server starts after the first
    wall_s: float
    replicas: int | None = None  # for --qps: the replicas measured to hold at the verified configuration
    replicas_why: str = ""  # how they were found, or why none was
    unverified: str = ""  # what was left unmeasured where the search stopped early

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["trials"] = [{**asdict(t), "log_tail": list(t.log_tail)} for t in self.trials]
        return {"kind": TUNE_KIND, "version": 1, **out}


def save_record(record: TuneRecord, path: Path) -> None:
    """Write ``record`` to ``path`` atomically (a temporary file renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def tune_record_json(path: Path) -> dict[str, Any] | None:
    """``path``'s JSON where it is a tune record (``kind: loadgen-tune``); None where it is anything else, left
    for the results reader to name. Each trial's ``results`` is resolved against the record's folder where
    it is not found as written (the search ran elsewhere, or the folder moved)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):  # the results reader names what is wrong
        return None
    if not isinstance(raw, dict) or raw.get("kind") != TUNE_KIND:
        return None
    trials = raw.get("trials")
    if not isinstance(trials, list) or not all(isinstance(t, dict) for t in trials):
        raise ResultsError(f"{path}: a tune record whose 'trials' is not a list of trials")
    for trial in trials:
        written = trial.get("results")
        if isinstance(written, str) and not Path(written).exists():
            trial["results"] = str(path.parent / Path(written).name)
    return raw
