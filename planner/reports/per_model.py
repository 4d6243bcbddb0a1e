"""Per-model results of levels whose requests named several models (LoRA adapters behind one endpoint)."""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.quantity import Metric
from loadgen.results import Results
from loadgen.slo_target import SloTarget
from planner.ci.gate import check_from_slo, per_model_checks
from planner.reports.document import Section, Table


def model_section(results: Results, slos: Sequence[SloTarget] = ()) -> Section | None:
    """Each split level's models: share, outcomes, latencies and the SLOs each one's own requests meet (the
    gate's per-model checks, so both say the same); None where no level split its requests."""
    rows = []
    checks = [check_from_slo(s) for s in slos]
    for level in results.levels:
        if not level.by_model:
            continue
        verdicts: dict[str, list[str]] = {}
        for check in checks:
            for r in per_model_checks(check, level):
                said = "not judged" if r.absent else "meets" if r.passed else "FAIL"
                verdicts.setdefault(r.model or "", []).append(f"{check.quantity} {said}")
        total = sum(part.completed for part in level.by_model.values()) or 1
        for name, part in level.by_model.items():
            view = level.model_view(name)
            cells = [_ms(view.percentile_ms(m, p)) for m, p in LATENCIES]
            rows.append((level.load.label, name, f"{part.completed / total:.0%}", str(part.completed),
                         str(sum(part.errors.values())), *cells, "; ".join(verdicts.get(name, [])) or "-"))  # fmt: skip
    if not rows:
        return None
    columns = ("level", "model", "share", "completed", "failed", "TTFT p50", "TTFT p95", "TPOT p50", "TPOT p95",
               "E2E p95", "SLOs (own requests)")  # fmt: skip
    return Section(
        title="Per model",
        paragraphs=("Each model's own requests (a LoRA adapter's traffic): one adapter can break an SLO the pooled "
                    "level meets. A percentile is judged only where the model had the requests it needs.",),
        table=Table(columns, tuple(rows)),
    )  # fmt: skip


def model_breaches(results: Results, slos: Sequence[SloTarget]) -> str | None:
    """One note naming the models whose own requests break an SLO, for the caveats: the levels, the plan and
    the verdicts read the pooled requests, which one adapter's tail hides in."""
    broken = [
        f"{r.model} ({r.check.quantity} at {level.load.label})"
        for level in results.levels
        if level.by_model
        for check in (check_from_slo(s) for s in slos)
        for r in per_model_checks(check, level)
        if not r.passed
    ]
    if not broken:
        return None
    return (f"per model, {', '.join(broken)} broke an SLO on its own requests, whatever the pooled level says; the "
            "levels and any plan read the requests pooled (see Per model)")  # fmt: skip


LATENCIES = ((Metric.TTFT, 50), (Metric.TTFT, 95), (Metric.TPOT, 50), (Metric.TPOT, 95), (Metric.E2E, 95))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"
