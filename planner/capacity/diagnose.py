"""The diagnosis (docs/design.md): a latency breach is fixed by a smaller batch, a capacity
shortfall by more replicas. Never the crossed wires (pure; returns findings, not prose to print)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["latency_breach", "slo_below_floor", "batch_headroom", "capacity_shortfall", "ok"]
Action = Literal["shrink_batch", "faster_step", "raise_batch", "add_replicas", "none"]


@dataclass(frozen=True, slots=True)
class Finding:
    kind: Kind
    action: Action
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Situation:
    """What runs now and what the plan found, as the diagnosis reads them."""

    slo_key: str | None  # the TPOT SLO that bounds the batch
    slo_ms: float | None
    current_batch: int | None
    step_ms_at_current: float | None
    max_batch: int | None
    floor: str | None = None  # why no batch can meet the TPOT SLO (the law's batch-1 step breaches it)
    current_replicas: int | None = None
    needed_replicas: int | None = None
    tokens_per_s_at_current: float | None = None
    tokens_per_s_at_max: float | None = None
    no_replica_count: str | None = None  # why no number of replicas meets a TTFT or E2E SLO


def diagnose(s: Situation) -> tuple[Finding, ...]:
    """The batch's finding (a floor, a breach, or headroom), then the replicas' (none can help, or a shortfall).

    Where the SLO is below the floor, shrinking the batch cannot help and saying so would be the crossed
    wires of another kind: the finding names the floor and what moves it.
    """
    findings = [f for f in (_batch_finding(s), _no_count_finding(s), _shortfall_finding(s)) if f is not None]
    if not findings:
        findings.append(Finding("ok", "none", "no latency breach or capacity shortfall found for the inputs given"))
    return tuple(findings)


def _batch_finding(s: Situation) -> Finding | None:
    """A TPOT SLO below the floor, a breach at the current batch, or headroom above it."""
    if s.floor is not None:
        return Finding(
            "slo_below_floor",
            "faster_step",
            f"{s.slo_key} <= {s.slo_ms:g} ms: {s.floor}. Neither a smaller batch nor more replicas can meet it.",
        )
    current, step = s.current_batch, s.step_ms_at_current
    if current is not None and step is not None and s.slo_ms is not None and step > s.slo_ms:
        target = (
            f"--max-num-seqs {s.max_batch}"
            if s.max_batch
            else "a batch below the smallest level measured (sweep lower concurrencies to find it)"
        )
        return Finding(
            "latency_breach",
            "shrink_batch",
            f"latency breach: at batch {current} a step takes {step:.1f} ms, over the "
            f"{s.slo_key} SLO of {s.slo_ms:g} ms. Shrink the batch: set {target}. More replicas would not make "
            "any stream faster.",
        )
    at_current, at_max = s.tokens_per_s_at_current, s.tokens_per_s_at_max
    if current is not None and s.max_batch is not None and s.max_batch > current and at_current and at_max:
        gain = at_max / at_current - 1
        return Finding(
            "batch_headroom",
            "raise_batch",
            f"batch headroom: the SLO allows batch {s.max_batch}, above the cap of {current} in use. "
            f"Raising --max-num-seqs to {s.max_batch} gives {at_max:,.1f} tok/s per replica instead "
            f"of {at_current:,.1f} (+{gain:.0%}), if the KV cache holds {s.max_batch} sequences.",
        )
    return None


def _no_count_finding(s: Situation) -> Finding | None:
    """No number of replicas meets a TTFT or E2E SLO."""
    if s.no_replica_count is None:
        return None
    return Finding(
        "slo_below_floor",
        "faster_step",
        f"{s.no_replica_count}. More replicas cannot meet it: a faster first token can (a shorter prompt, a "
        "faster prefill, a looser SLO).",
    )


def _shortfall_finding(s: Situation) -> Finding | None:
    """More replicas needed than run now."""
    if s.current_replicas is None or s.needed_replicas is None or s.needed_replicas <= s.current_replicas:
        return None
    return Finding(
        "capacity_shortfall",
        "add_replicas",
        f"capacity shortfall: the target load needs {s.needed_replicas} replicas at the SLO batch, "
        f"{s.current_replicas} run now. Add {s.needed_replicas - s.current_replicas}; a smaller batch would only "
        "lower each replica's throughput.",
    )
