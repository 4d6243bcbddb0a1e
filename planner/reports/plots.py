"""The report's plots, drawn with matplotlib's Agg backend into PNG bytes (no display, no files).

Each function takes plain data and returns a ``Plot`` whose image is
embedded in the HTML report as a data URI, so the file opens offline.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any, Literal

import matplotlib

matplotlib.use("Agg")  # before pyplot: never look for a display

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from loadgen.quantity import Metric
from planner.capacity.batch_limit import model_name
from planner.capacity.capacity_plan import CapacityPlan
from planner.fleet.fleet_plan import FleetPlan
from planner.laws.lengthmodel import tpot_features
from planner.laws.stepmodel import StepModel
from planner.reports.document import Plot
from planner.reports.fleet_report import fleet_columns
from planner.reports.tune_report import FrontPoint

STYLE: dict[Any, Any] = {"figure.figsize": (6.4, 3.8), "axes.grid": True, "grid.alpha": 0.3, "font.size": 9}


DPI = 110
Mark = tuple[str, Axes, Literal["x", "y"], float]  # a reference line: its name, axes, the axis it crosses, value


def _png(fig: Figure, marks: Sequence[Mark] = ()) -> tuple[bytes, dict[str, tuple[float, float]]]:
    """The figure as PNG bytes, and where each mark's line lies in the image: (value, pixel) with the pixel
    a column for an ``x`` mark, a row from the top for a ``y`` mark, so a reader can check the drawing."""
    buf = io.BytesIO()
    fig.set_dpi(DPI)
    fig.tight_layout()
    fig.canvas.draw()  # the layout the file gets: savefig at this dpi keeps the figure's size in pixels
    height = fig.get_figheight() * DPI
    at = {}
    for name, ax, axis, value in marks:
        x0, y0 = ax.get_xlim()[0], ax.get_ylim()[0]
        x, y = ax.transData.transform((value, y0) if axis == "x" else (x0, value))
        at[name] = (value, float(x) if axis == "x" else float(height - y))
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue(), at


MAX_LABELLED = 12  # levels drawn one by one (ITL curves, point labels): more would only be ink


def _labelled(n: int) -> set[int]:
    """Indices of at most MAX_LABELLED levels spread evenly, the first and the last included."""
    return {round(i * (n - 1) / (MAX_LABELLED - 1)) for i in range(MAX_LABELLED)} if n > MAX_LABELLED else set(range(n))


def _plain_log_labels(axis: Any) -> None:
    """A log axis labelled 90 and 200, not 9x10^1 and 2x10^2 (matplotlib's default reads as a formula)."""
    axis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def _values(xs: Sequence[float | None], ys: Sequence[float | None]) -> tuple[np.ndarray, np.ndarray]:
    pairs = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    return np.array([p[0] for p in pairs], dtype=float), np.array([p[1] for p in pairs], dtype=float)


def tpot_vs_batch(plan: CapacityPlan) -> Plot:
    obs = plan.observations
    assert obs is not None
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        batch = [lv.batch for lv in obs.levels]
        for attr, label, marker in (("tpot_p50_ms", "TPOT p50", "o"), ("tpot_p95_ms", "TPOT p95", "s")):
            x, y = _values(batch, [getattr(lv, attr) for lv in obs.levels])
            ax.plot(x, y, marker, label=label)
        if plan.fit is not None and batch:
            grid = np.linspace(0, max(batch) * 1.1, 100)
            ax.plot(
                grid,
                plan.fit.step_ms(grid),
                "-",
                color="C2",
                label=f"fit {plan.fit.base_ms:.1f} + {plan.fit.per_seq_ms:.3f}*b",
            )
        marks: list[Mark] = []
        for lim in plan.limits:
            if lim.slo.metric == Metric.TPOT:
                ax.axhline(lim.slo.limit, color="C3", ls="--", label=f"SLO {lim.slo.key} {lim.slo.limit:g} ms")
                marks.append((f"slo-{lim.slo.key}", ax, "y", lim.slo.limit))
        deciding = next((lim for lim in plan.limits if lim.batch == plan.max_batch and lim.model is not None), None)
        if deciding is not None and deciding.model is not None and deciding.model is not plan.fit and batch:
            _decision_law(ax, deciding.model, max(max(batch), plan.max_batch or 0) * 1.1, deciding.slo.key)
        if plan.max_batch is not None:  # the decision itself: the batch the plan tells the server to cap at
            ax.axvline(plan.max_batch, color="C4", ls=":", label=f"chosen batch {plan.max_batch}")
            marks.append(("chosen-batch", ax, "x", float(plan.max_batch)))
        ax.set_xlabel(f"batch (sequences; axis: {obs.batch_source})")
        ax.set_ylabel("TPOT (ms)")
        ax.set_title("TPOT vs batch: the law the decision used and the batch it chose")
        ax.legend()
        png, at = _png(fig, marks)
        return Plot(
            name="tpot_vs_batch",
            caption="TPOT p50/p95 against the batch, the fitted law, the law the decision used and the batch it chose",
            png=png,
            marks=at,
        )


def _decision_law(ax: Axes, law: StepModel, top: float, key: str) -> None:
    """The law the batch was decided on (its SLO's own percentile), with its 95% band where the fit has one."""
    grid = np.linspace(0, top, 100)
    name = key.removesuffix("_ms")
    ax.plot(grid, law.step_ms(grid), "--", color="C1", label=f"{name} law {law.base_ms:.1f} + {law.per_seq_ms:.3f}*b")
    if law.base_ci_ms is not None and law.per_seq_ci_ms is not None:
        low = law.base_ci_ms[0] + law.per_seq_ci_ms[0] * grid
        high = law.base_ci_ms[1] + law.per_seq_ci_ms[1] * grid
        ax.fill_between(grid, low, high, color="C1", alpha=0.15, label=f"{name} law, 95% interval")


def ttft_vs_load(plan: CapacityPlan) -> Plot:
    obs, sat = plan.observations, plan.saturation
    assert obs is not None and sat is not None
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        conc = [lv.concurrency for lv in obs.levels]
        for attr, label, marker in (("ttft_p50_ms", "TTFT p50", "o-"), ("ttft_p95_ms", "TTFT p95", "s-")):
            x, y = _values(conc, [getattr(lv, attr) for lv in obs.levels])
            ax.plot(x, y, marker, label=label)
        knee = conc[sat.states.index("knee")] if "knee" in sat.states else None
        if knee is not None:
            ax.axvline(knee, color="C3", ls=":", label=f"knee (B ~ {sat.max_batch:.0f})")
        ax.set_xlabel("load (achieved concurrency)")
        ax.set_ylabel("TTFT (ms)")
        ax.set_yscale("log")
        _plain_log_labels(ax.yaxis)
        ax.set_title("TTFT vs load")
        ax.legend()
        said = f"the knee marked at concurrency {knee:.1f}" if knee is not None else "no knee in the range swept"
        png, at = _png(fig, [("knee", ax, "x", knee)] if knee is not None else [])
        return Plot(name="ttft_vs_load", caption=f"TTFT p50/p95 against load; {said}", png=png, marks=at)


def throughput_vs_load(plan: CapacityPlan) -> Plot:
    obs = plan.observations
    assert obs is not None
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        x, y = _values([lv.concurrency for lv in obs.levels], [lv.tokens_per_s for lv in obs.levels])
        ax.plot(x, y, "o-", label="measured (one replica)")
        if plan.fit is not None and len(x):
            grid = np.linspace(1, max(x), 100)
            ax.plot(grid, plan.fit.tokens_per_s(grid), "--", label="law: b*1000/step(b)")
        if plan.tokens_per_s_per_replica and plan.max_batch:
            ax.axhline(
                plan.tokens_per_s_per_replica,
                color="C3",
                ls=":",
                label=f"per replica at the SLO batch {plan.max_batch}",
            )
        ax.set_xlabel("load (achieved concurrency)")
        ax.set_ylabel("output tokens/s")
        ax.set_title("Throughput vs load")
        ax.legend()
        return Plot(
            name="throughput_vs_load",
            caption="Output tokens/s against load, and per replica at the SLO batch",
            png=_png(fig)[0],
        )


def pareto(plan: CapacityPlan) -> Plot:
    obs = plan.observations
    assert obs is not None
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        per_user = [1000.0 / lv.tpot_p50_ms if lv.tpot_p50_ms else None for lv in obs.levels]
        x, y = _values([lv.tokens_per_s for lv in obs.levels], per_user)
        ax.plot(x, y, "o-")
        shown = _labelled(len(obs.levels))
        for i, (lv, xi, yi) in enumerate(zip(obs.levels, [lv.tokens_per_s for lv in obs.levels], per_user)):
            if i in shown and xi is not None and yi is not None:
                ax.annotate(lv.label, (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set_xlabel("output tokens/s per replica")
        ax.set_ylabel("tokens/s per user (1000 / TPOT p50)")
        ax.set_title("Serving Pareto curve: per-user speed vs replica throughput")
        return Plot(name="pareto", caption="Tokens/s per user against tokens/s per replica", png=_png(fig)[0])


def itl_distribution(plan: CapacityPlan) -> Plot:
    obs = plan.observations
    assert obs is not None
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        shown = _labelled(len(obs.results))
        lows = []
        for lv in (lv for i, lv in enumerate(obs.results) if i in shown):
            counts = lv.histograms[Metric.ITL].counts()
            if not counts:
                continue
            values = np.array([v for v, _ in counts], dtype=float) / 1000.0
            cum = np.cumsum([c for _, c in counts]) / sum(c for _, c in counts)
            ax.step(values, cum * 100, where="post", label=lv.load.label)
            if (p1 := lv.percentile_ms(Metric.ITL, 1)) is not None and p1 > 0:
                lows.append(p1)
        ax.set_xscale("log")
        _plain_log_labels(ax.xaxis)
        if lows:
            # a few near-zero gaps (two tokens in one socket read) would stretch a log axis over decades
            ax.set_xlim(left=min(lows) / 2)
        ax.set_xlabel("inter-token latency (ms)")
        ax.set_ylabel("percentile")
        ax.set_title("ITL distribution per level")
        ax.legend(fontsize=7, ncol=2)
        return Plot(
            name="itl_distribution",
            caption=f"Cumulative ITL distribution of {'every level' if len(shown) == len(obs.results) else f'{len(shown)} levels spread over the sweep'} (from its histogram; the axis starts at half the lowest p1)",
            png=_png(fig)[0],
        )


def step_surface(plan: CapacityPlan) -> Plot:
    """The length model as drawn: each calibration sweep's TPOT rows against batch with the model at that
    sweep's mix, the asked mix predicted with its 95% band, the TPOT SLOs and the batch acted on."""
    forecast = plan.mix
    assert forecast is not None
    model = forecast.model
    tpot = [p for p in model.points if p.kind == "tpot"]
    top = max(max(p.batch for p in tpot), plan.max_batch or 0) * 1.15
    grid = np.linspace(1.0, max(top, 2.0), 80)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        for k, group in enumerate(dict.fromkeys(p.group for p in tpot)):
            rows = [p for p in tpot if p.group == group]
            mix = rows[0].mix
            colour = f"C{k % 10}"
            ax.plot(
                [p.batch for p in rows], [p.value_ms for p in rows], "o", color=colour, label=f"{group} ({mix.label})"
            )
            line = [model.predict(tpot_features(b, mix)) for b in grid]
            if all(p is not None for p in line):
                ax.plot(grid, [p.value_ms for p in line if p is not None], "-", color=colour, alpha=0.7)
        asked = [model.predict(tpot_features(b, forecast.mix)) for b in grid]
        if all(p is not None for p in asked):
            values = [p for p in asked if p is not None]
            ax.plot(grid, [p.value_ms for p in values], "--", color="k", label=f"PREDICTED {forecast.mix.label}")
            ax.fill_between(grid, [p.low_ms for p in values], [p.high_ms for p in values], color="k", alpha=0.15)
        marks: list[Mark] = []
        for lim in plan.limits:
            if lim.slo.metric == Metric.TPOT:
                ax.axhline(lim.slo.limit, color="C3", ls="--", label=f"SLO {lim.slo.key} {lim.slo.limit:g} ms")
                marks.append((f"slo-{lim.slo.key}", ax, "y", lim.slo.limit))
                if lim.model is not None and lim.slo.percentile != 50:  # judged on its own percentile's model
                    ax.plot(grid, lim.model.step_ms(grid), ":", color="k", label=f"PREDICTED {model_name(lim.slo)}")
        if plan.max_batch is not None:
            ax.axvline(plan.max_batch, color="C3", ls=":", label=f"batch acted on: {plan.max_batch}")
            marks.append(("max-batch", ax, "x", plan.max_batch))
        ax.set_xlabel("batch (sequences)")
        ax.set_ylabel(f"{model.statistic.replace('_', ' ').replace('tpot', 'TPOT')} (ms)")
        ax.set_title("Step time against batch: calibration, model, and the mix asked")
        ax.legend(fontsize=7)
        png, at = _png(fig, marks)
        return Plot(
            name="step_surface",
            caption="TPOT against batch for each calibrated mix (points measured, lines the length model) and the asked "
            "mix predicted with its 95% band",
            png=png,
            marks=at,
        )


def all_plots(plan: CapacityPlan) -> tuple[Plot, ...]:
    if plan.mix is not None:
        return (step_surface(plan),)
    if plan.observations is None or plan.saturation is None:
        return ()
    return (tpot_vs_batch(plan), ttft_vs_load(plan), throughput_vs_load(plan), pareto(plan), itl_distribution(plan))


def fleet_over_time(plan: FleetPlan) -> Plot:
    """Demand (requests/s, right axis) and each fleet's replicas paid for, bucket by bucket (steps): the chosen
    fleet (or mix) bold and named so in the legend, its peak a dotted line, so the plot shows the decision."""
    d = plan.demand
    edges = np.arange(len(d.rates) + 1) * d.bucket_s / 3600.0  # hours: a day reads 0..24, not 0..86,400
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        colour = 0
        for k, fleet in enumerate(plan.fleets):
            role = "chosen: " if k == 0 else ""
            # a mix of variants is drawn one line per variant: one count over two GPU types means nothing
            for name, replicas in fleet_columns(fleet):
                ax.stairs(
                    replicas, edges, color=f"C{colour % 10}", lw=2.5 if k == 0 else 1, label=f"{role}{name} replicas"
                )
                colour += 1
        ax.set_xlabel("time (h)")
        ax.set_ylabel("replicas")
        demand = ax.twinx()
        demand.stairs(d.rates, edges, color="k", ls="--", alpha=0.6, label="demand (requests/s)")
        demand.set_ylabel("requests/s")
        demand.grid(False)
        marks: list[Mark] = []
        chosen = plan.chosen
        if chosen is not None:  # each of its kinds' peak, in its line's colour (a mix's two counts never added)
            for k, (name, replicas) in enumerate(fleet_columns(chosen)):
                peak = max(replicas)
                ax.axhline(peak, color=f"C{k}", ls=":", lw=1.5, label=f"peak of {name}: {peak} replicas")
                marks.append((f"peak-{k}", ax, "y", peak))
        handles = ax.get_legend_handles_labels()[0] + demand.get_legend_handles_labels()[0]
        ax.legend(handles=handles, fontsize=7, loc="upper left")
        chose = f": chosen {chosen.name}" if chosen is not None else ""
        ax.set_title(f"Demand and replicas over time (a perfect autoscaler){chose}")
        png, at = _png(fig, marks)
        return Plot(
            name="fleet_over_time",
            caption="Replicas paid for per bucket for each variant (the chosen one bold, its peak dotted) and the "
            "demand they serve",
            png=png,
            marks=at,
        )


def tune_front(points: Sequence[FrontPoint], tpot_limit_ms: float | None) -> Plot:
    """Every level a tune search measured: tokens/s per user against tokens/s per replica, each trial's verdict
    its marker, the TPOT SLO a vertical line (its side shaded), the verified configuration ringed."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        styles = {"calibration": ("o", "C7"), "holds": ("o", "C2"), "fails": ("x", "C3"), "no verdict": ("+", "C7")}
        drawn = [(p, p.per_user_tok_s, p.per_replica_tok_s) for p in points]
        xy = [(p, x, y) for p, x, y in drawn if x is not None and y is not None]
        for label, (marker, colour) in styles.items():
            mine = [(x, y) for p, x, y in xy if p.verdict == label]
            if mine:
                ax.plot(*zip(*mine), marker, color=colour, ls="none", label=label)
        marks: list[Mark] = []
        chosen = [(p, x, y) for p, x, y in xy if p.verified]
        if chosen:
            best, x, y = chosen[0]
            ax.plot([x], [y], "o", ms=14, mfc="none", mec="C4", mew=2, label=f"verified: {best.config}")
            marks.append(("verified-per-replica", ax, "y", y))
        if tpot_limit_ms:
            need = 1000.0 / tpot_limit_ms
            ax.axvline(need, color="C3", ls="--", label=f"TPOT SLO: {need:.1f} tok/s per user")
            right = ax.get_xlim()[1]
            ax.axvspan(need, right, color="C2", alpha=0.07)
            ax.set_xlim(right=right)
            marks.append(("slo-per-user", ax, "x", need))
        ax.set_xlabel("output tokens/s per user (1000 / TPOT)")
        ax.set_ylabel("output tokens/s per replica")
        ax.set_title("The trials' front: what a user gets against what a replica serves")
        ax.legend(fontsize=7)
        png, at = _png(fig, marks)
        return Plot(
            name="tune_front",
            caption="Every level measured by the search; the shaded side of the dashed line keeps the TPOT SLO",
            png=png,
            marks=at,
        )
