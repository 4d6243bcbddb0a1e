"""The chapter's diagnosis: a latency breach is fixed by a smaller batch, a capacity
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


def diagnose(
    *,
    slo_key: str | None,
    slo_ms: float | None,
    current_batch: int | None,
    step_ms_at_current: float | None,
    max_batch: int | None,
    floor: str | None = None,
    current_replicas: int | None,
    needed_replicas: int | None,
    tokens_per_s_at_current: float | None = None,
    tokens_per_s_at_max: float | None = None,
    no_replica_count: str | None = None,
) -> tuple[Finding, ...]:
    """``floor``: why no batch can meet the TPOT SLO (the law's batch-1 step breaches it), if so;
    ``no_replica_count``: why no number of replicas meets a TTFT or E2E SLO, if so.

    Then shrinking the batch cannot help and saying so would be the crossed
    wires of another kind: the finding names the floor and what moves it.
    """
    findings = []
    if floor is not None:
        findings.append(
            Finding(
                "slo_below_floor",
                "faster_step",
                f"{slo_key} <= {slo_ms:g} ms: {floor}. Neither a smaller batch nor more replicas can meet it.",
            )
        )
    elif (
        current_batch is not None
        and step_ms_at_current is not None
        and slo_ms is not None
        and step_ms_at_current > slo_ms
    ):
        target = (
            f"--max-num-seqs {max_batch}"
            if max_batch
            else "a batch below the smallest level measured (sweep lower concurrencies to find it)"
        )
        findings.append(
            Finding(
                "latency_breach",
                "shrink_batch",
                f"latency breach: at batch {current_batch} a step takes {step_ms_at_current:.1f} ms, over the "
                f"{slo_key} SLO of {slo_ms:g} ms. Shrink the batch: set {target}. More replicas would not make "
                "any stream faster.",
            )
        )
    elif (
        current_batch is not None
        and max_batch is not None
        and max_batch > current_batch
        and tokens_per_s_at_current
        and tokens_per_s_at_max
    ):
        gain = tokens_per_s_at_max / tokens_per_s_at_current - 1
        findings.append(
            Finding(
                "batch_headroom",
                "raise_batch",
                f"batch headroom: the SLO allows batch {max_batch}, above the cap of {current_batch} in use. "
                f"Raising --max-num-seqs to {max_batch} gives {tokens_per_s_at_max:,.1f} tok/s per replica instead "
                f"of {tokens_per_s_at_current:,.1f} (+{gain:.0%}), if the KV cache holds {max_batch} sequences.",
            )
        )
    if no_replica_count is not None:
        findings.append(
            Finding(
                "slo_below_floor",
                "faster_step",
                f"{no_replica_count}. More replicas cannot meet it: a faster first token can (a shorter prompt, a "
                "faster prefill, a looser SLO).",
            )
        )
    if current_replicas is not None and needed_replicas is not None and needed_replicas > current_replicas:
        findings.append(
            Finding(
                "capacity_shortfall",
                "add_replicas",
                f"capacity shortfall: the target load needs {needed_replicas} replicas at the SLO batch, "
                f"{current_replicas} run now. Add {needed_replicas - current_replicas}; a smaller batch would only "
                "lower each replica's throughput.",
            )
        )
    if not findings:
        findings.append(Finding("ok", "none", "no latency breach or capacity shortfall found for the inputs given"))
    return tuple(findings)
