"""``loadgen report tune.json``: what a ``loadgen tune`` search measured, as a report (pure).

The record says which configuration was verified and why each trial was run; its trials' results files hold
the levels. Every level is a point of the front a serving team trades along: output tokens/s per user (1000
over the TPOT statistic the SLO names, so the SLO is a vertical line) against output tokens/s per replica.
The trial a cap was verified at sits on the SLO's side of that line with the most tokens/s a replica serves;
with a price per replica-hour, each trial's cost per million output tokens at its cap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from loadgen.slo_target import SloTarget
from planner.reports.document import Plot, Report, Section, Table

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class FrontPoint:
    """One measured level of one trial: what a user and what a replica got."""

    trial: int
    label: str  # the level, e.g. "c=47"
    config: str  # the trial's configuration, e.g. "max_num_seqs=47 max_num_batched_tokens=2135"
    per_user_tok_s: float | None  # 1000 / the TPOT statistic (None: no TPOT measured)
    per_replica_tok_s: float | None
    verdict: str  # the trial's: "calibration", "holds", "fails", or "no verdict" (refused, untrusted, stopped)
    verified: bool  # the cap level of the trial whose configuration the search verified


def tpot_slo(record: Mapping[str, Any]) -> SloTarget | None:
    """The TPOT SLO the search held (the first, where several were given)."""
    for key, limit in (record.get("slos") or {}).items():
        slo = SloTarget.from_key(str(key), float(limit))
        if slo.metric == Metric.TPOT:
            return slo
    return None


def config_text(config: Mapping[str, Any]) -> str:
    return " ".join(f"{name}={value}" for name, value in config.items())


def front_points(record: Mapping[str, Any], levels: Mapping[int, Sequence[LevelResult]]) -> list[FrontPoint]:
    """Every measured level of every trial (``levels``: trial number -> its results file's levels)."""
    slo = tpot_slo(record)
    verified = dict(record.get("verified") or {})
    points = []
    for trial in record["trials"]:
        config = dict(trial.get("config") or {})
        is_verified = bool(verified) and all(config.get(k) == v for k, v in verified.items())
        for k, level in enumerate(levels.get(int(trial["number"]), ())):
            if slo is None or slo.mean:
                tpot = level.mean_ms(Metric.TPOT)
            else:
                tpot = level.percentile_ms(Metric.TPOT, slo.percentile or 50.0)
            points.append(
                FrontPoint(
                    trial=int(trial["number"]),
                    label=level.load.label,
                    config=config_text(config),
                    per_user_tok_s=1000.0 / tpot if tpot else None,
                    per_replica_tok_s=level.output_tokens_per_s,
                    verdict=_verdict(trial),
                    verified=is_verified and trial.get("holds") is True and k == 0,  # at the cap itself
                )
            )
    return points


def _verdict(trial: Mapping[str, Any]) -> str:
    if trial.get("verdict") == "calibration":
        return "calibration"
    holds = trial.get("holds")
    return "no verdict" if holds is None else "holds" if holds else "fails"


def cost_per_million(price_per_hour: float, tok_s: float | None) -> float | None:
    """USD per million output tokens for a replica at ``price_per_hour`` serving ``tok_s``."""
    if not tok_s:
        return None
    return price_per_hour / (tok_s * SECONDS_PER_HOUR) * 1e6


def build_tune_report(
    record: Mapping[str, Any],
    points: Sequence[FrontPoint],
    *,
    price_per_hour: float | None = None,
    plots: tuple[Plot, ...] = (),
) -> Report:
    """The verified configuration first, then every trial (predicted against measured), then the front."""
    return Report(
        title="Tune: the server configuration, verified",
        headline=_headline(record),
        meta=(("server command", str(record.get("serve_cmd", ""))), ("stopped", str(record.get("stopped", "")))),
        sections=(_trials(record, points, price_per_hour), _front(points, record)),
        plots=plots,
        lead=1,
    )


def _headline(record: Mapping[str, Any]) -> str:
    verified = record.get("verified")
    cost = f"{record.get('restarts', 0)} restart(s), {float(record.get('wall_s') or 0):.0f} s"
    if not verified:
        return f"No configuration verified ({record.get('stopped', 'stopped')}); {cost}."
    flags = " ".join(f"--{name.replace('_', '-')} {value}" for name, value in verified.items())
    replicas = f"; {record['replicas']} replicas measured to hold" if record.get("replicas") else ""
    return f"Set {flags}: verified as measured{replicas}; {cost}."


def _trials(record: Mapping[str, Any], points: Sequence[FrontPoint], price: float | None) -> Section:
    slos = list((record.get("slos") or {}).keys())
    columns = ["trial", "configuration", "why", "verdict", *(f"{key} predicted / measured" for key in slos)]
    columns += ["tok/s per replica at the cap"] + (["USD per M output tokens"] if price is not None else [])
    at_cap = {p.trial: p for p in reversed(points)}  # a trial's first level: its cap
    rows = []
    for trial in record["trials"]:
        number = int(trial["number"])
        predicted, measured = trial.get("predicted_ms") or {}, trial.get("measured") or {}
        cells = [str(number), config_text(trial.get("config") or {}), str(trial.get("why", "")),
                 str(trial.get("verdict", ""))]  # fmt: skip
        cells += [f"{_ms(predicted.get(key))} / {_ms(measured.get(key))}" for key in slos]
        point = at_cap.get(number)
        rate = point.per_replica_tok_s if point is not None else None
        cells.append(f"{rate:,.0f}" if rate else "-")
        if price is not None:
            cost = cost_per_million(price, rate)
            cells.append(f"${cost:,.2f}" if cost is not None else "-")
        rows.append(tuple(cells))
    priced = f" at ${price:g} per replica-hour" if price is not None else ""
    return Section(
        title="Trials",
        paragraphs=(
            f"Each server start{priced}: the law's prediction at its configuration against what was measured.",
        ),
        table=Table(tuple(columns), tuple(rows)),
    )


def _front(points: Sequence[FrontPoint], record: Mapping[str, Any]) -> Section:
    slo = tpot_slo(record)
    line = f"a user needs at least {1000.0 / slo.limit:,.1f} tok/s ({slo.key} {slo.limit:g} ms)" if slo else ""
    rows = tuple(
        (
            f"trial {p.trial} {p.label}",
            p.config,
            f"{p.per_user_tok_s:,.1f}" if p.per_user_tok_s else "-",
            f"{p.per_replica_tok_s:,.0f}" if p.per_replica_tok_s else "-",
            "VERIFIED" if p.verified else p.verdict,
        )
        for p in sorted(points, key=lambda p: -(p.per_user_tok_s or 0.0))
    )
    return Section(
        title="Front: tokens/s per user against tokens/s per replica",
        paragraphs=(f"Every level measured, most tokens/s per user first; {line}.".replace("; .", "."),),
        table=Table(("level", "configuration", "tok/s per user", "tok/s per replica", "trial"), rows),
    )


def _ms(value: Any) -> str:
    return f"{float(value):,.1f}" if isinstance(value, int | float) else "-"
