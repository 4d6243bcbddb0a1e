"""A report as data: its sections, tables, plots and headline, which every renderer draws alike (pure)."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFINITIONS = (
    "TTFT is the time from when a request was due (its scheduled arrival, or the moment its client became free) "
    "to the first token event (a chunk carrying an output token's delta, empty-content ones included, unless "
    "the run used the text convention), so client-side queueing counts; TPOT is a request's mean gap "
    "between output tokens, (t_last - t_first) / (tokens - 1); ITL is every gap between consecutive token events, "
    "pooled; E2E runs from due time to the end of the stream. Percentiles come from HdrHistograms (3 significant "
    "digits). Throughput counts output tokens that arrived inside the measured window (warm-up and drain "
    "excluded); failed requests count in the error rate and stay out of the latencies. Goodput is the share of "
    "requests (failures included) that met every latency SLO of the profile on their own numbers: each request's "
    "TTFT, TPOT and E2E against each SLO's threshold (a percentile SLO's threshold, applied per request). A level "
    "is saturated when two independent signals agree (batch or throughput plateau, TTFT growing ~1/X per client, "
    "a server queue), and untrusted when it is client-bound, interrupted, failing too many requests, shorter than "
    "three request lifetimes, or has too few samples for a percentile asked (a p95 needs 59, a p99 299)."
)


_NUMBER = re.compile(r"^(?:[-+$~]?\d|-$)")


@dataclass(frozen=True, slots=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def text_columns(self) -> tuple[bool, ...]:
        """Per column, whether it holds words (read from the left) rather than numbers (lined up on the
        right); the first column, the row's name, is always words."""
        cells = list(zip(*self.rows)) or [()] * len(self.columns)
        return tuple(k == 0 or sum(not _NUMBER.match(c) for c in col) * 2 > len(col) for k, col in enumerate(cells))


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    title: str
    paragraphs: tuple[str, ...] = ()
    table: Table | None = None
    bullets: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Plot:
    """One figure for the HTML report (drawn by ``planner.reports.plots``, which alone imports matplotlib)."""

    name: str
    caption: str
    png: bytes
    # reference lines as drawn: name -> (value, pixel column of an x mark or row from the top of a y mark)
    marks: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    title: str
    headline: str  # the answer in one sentence, first thing a reader sees
    meta: tuple[tuple[str, str], ...]
    sections: tuple[Section, ...]
    plots: tuple[Plot, ...] = ()
    lead: int = 0  # the sections that state the decision: the plots are drawn right after them

    @property
    def body(self) -> tuple[Section, ...]:
        """The sections after the decision and its plots: the evidence, then the appendix."""
        return self.sections[self.lead :]

    def to_json(self) -> dict[str, Any]:
        """The report as data (``report --json``): the same sections the Markdown shows."""
        return {
            "title": self.title,
            "headline": self.headline,
            "meta": dict(self.meta),
            "sections": [
                {
                    "title": sec.title,
                    "paragraphs": list(sec.paragraphs),
                    "table": None
                    if sec.table is None
                    else [dict(zip(sec.table.columns, row)) for row in sec.table.rows],
                    "bullets": list(sec.bullets),
                }
                for sec in self.sections
            ],
        }
