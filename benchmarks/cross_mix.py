"""Leave one mix out on published tables of real engines: how the planner's cross-mix answers hold.

For each deployment measured at several prompt/output mixes, each mix in turn is left out, the plan is
asked for it from the others (``plan --prompt-tokens P --output-tokens O --predict-levels ...``), and its
answers are set beside what was published:

- TPOT and TTFT at every unsaturated level of the left-out mix: the error of the point, whether the
  published value lies in the printed 95% interval, and the interval's half-width relative to its point;
- the max batch for TPOT SLOs set at one third and two thirds of the left-out mix's measured TPOT range,
  against the batch at which the published TPOT crosses them (never above it is the target).

Usage::

    python benchmarks/cross_mix.py [TABLE_DIR ...]   # default: ../shared/reference/gpu-tables and tests/data

A mix is "interior" when its prompt and output lengths both lie within the calibrated mixes' ranges.
Prints one row per case and a summary; nothing here touches the network.
"""

from __future__ import annotations

import itertools
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from loadgen.inputs.imports import ImportedLevel, read_levels, to_results
from loadgen.level.aggregates import mean_output_tokens, mean_prompt_tokens
from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from loadgen.results import Results
from loadgen.slo_target import SloTarget
from planner.capacity.request import PlanRequest
from planner.evidence.verdicts import judge
from planner.front_door import PlanInputs, plan

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIRS = (ROOT.parent / "shared" / "reference" / "gpu-tables", ROOT / "tests" / "data")
MIX_FILE = re.compile(r"^(?P<family>.+?)_(?P<prompt>\d+)in_(?P<output>\d+)out\.csv$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """One unsaturated level of a left-out mix: predicted against published."""

    family: str
    mix: str
    interior: bool
    metric: str
    clients: int
    published: float
    point: float
    low: float | None
    high: float | None

    @property
    def error(self) -> float:
        return self.point / self.published - 1.0

    @property
    def inside(self) -> bool:
        return self.low is not None and self.high is not None and self.low <= self.published <= self.high

    @property
    def half_width(self) -> float | None:
        if self.low is None or self.high is None or self.point <= 0:
            return None
        return (self.high - self.low) / 2 / self.point


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchCase:
    family: str
    mix: str
    interior: bool
    slo_ms: float
    crossing: float
    answered: int | None
    point: int | None
    note: str


def families(dirs: tuple[Path, ...]) -> dict[str, dict[tuple[int, int], Results]]:
    """Each deployment's mixes, imported as ``loadgen import`` would."""
    found: dict[str, dict[tuple[int, int], Results]] = defaultdict(dict)
    for folder in dirs:
        for path in sorted(folder.glob("*.csv")):
            m = MIX_FILE.match(path.name)
            if m is None:
                continue
            levels, fmt = read_levels(path)
            results = to_results(levels, source=path.name, fmt=fmt, model="unknown")
            found[m["family"]][(int(m["prompt"]), int(m["output"]))] = results
    for path in (ROOT / "tests" / "data").glob("*_mixes.csv"):  # one file holding several mixes
        levels, fmt = read_levels(path)
        by_mix: dict[tuple[int, int], list[ImportedLevel]] = defaultdict(list)
        for level in levels:
            by_mix[(round(level.prompt_tokens or 0), round(level.output_tokens or 0))].append(level)
        for key, rows in by_mix.items():
            found[path.stem][key] = to_results(rows, source=f"{path.name} {key}", fmt=fmt, model="unknown")
    return {k: v for k, v in found.items() if len(v) >= 3}


def _tpot_statistic(results: Results) -> tuple[float | None, str]:
    level = results.levels[0]
    return (50.0, "tpot_p50") if level.percentile_ms(Metric.TPOT, 50) is not None else (None, "tpot_mean")


def _value(level: LevelResult, metric: Metric, q: float | None) -> float | None:
    return level.mean_ms(metric) if q is None else level.percentile_ms(metric, q)


def leave_one_out(family: str, mixes: dict[tuple[int, int], Results]) -> tuple[list[Cell], list[BatchCase]]:
    cells: list[Cell] = []
    cases: list[BatchCase] = []
    for held, truth in mixes.items():
        rest = [(f"{p}in_{o}out", r) for (p, o), r in mixes.items() if (p, o) != held]
        prompts = [p for p, _ in mixes if (p, _) != held]
        outputs = [o for (p, o) in mixes if (p, o) != held]
        interior = min(prompts) <= held[0] <= max(prompts) and min(outputs) <= held[1] <= max(outputs)
        verdicts = judge(truth.levels)
        obs = verdicts.observations
        unsat = [i for i in verdicts.saturation.unsaturated if verdicts.levels[i].trusted]
        q, stat = _tpot_statistic(truth)
        p_tok = _mean_tokens(truth, "prompt")
        o_tok = _mean_tokens(truth, "output")
        levels = tuple(sorted({round(truth.levels[i].load.value) for i in unsat}))
        label = f"{held[0]}/{held[1]}"
        tpots = sorted(
            (obs.levels[i].batch, v) for i in unsat if (v := _value(truth.levels[i], Metric.TPOT, q)) is not None
        )
        slos: list[float | None] = []
        if len(tpots) >= 2:
            low, high = tpots[0][1], tpots[-1][1]
            slos = [low + (high - low) * f for f in (1 / 3, 2 / 3)]
        for slo in slos or [None]:
            request = PlanRequest(
                slos=(SloTarget.from_key(f"{stat}_ms", slo),) if slo is not None else (),
                prompt_tokens=p_tok,
                output_tokens=o_tok,
            )
            try:
                outcome = plan(PlanInputs(request=request, calibrations=tuple(rest), predict_levels=levels))
            except Exception as exc:  # a refusal is a result here: printed, and counted unanswered
                print(f"  {family} {label}: refused: {str(exc)[:160]}")
                if slo is not None:
                    cases.append(
                        BatchCase(family=family, mix=label, interior=interior, slo_ms=slo,
                                  crossing=_crossing(tpots, slo), answered=None, point=None, note=str(exc)[:120])
                    )  # fmt: skip
                continue
            capacity = outcome.capacity
            assert capacity is not None
            if slo is not None:
                limit = next((lim for lim in capacity.limits), None)
                cases.append(
                    BatchCase(family=family, mix=label, interior=interior, slo_ms=slo, crossing=_crossing(tpots, slo),
                              answered=capacity.max_batch, point=limit.model_batch if limit else None,
                              note=(limit.note if limit else "")[:300])
                )  # fmt: skip
            if slos and slo != slos[0]:  # the levels once per left-out mix
                continue
            predicted = {lv.concurrency: lv for lv in outcome.predicted.levels} if outcome.predicted else {}
            for i in unsat:
                level = truth.levels[i]
                c = round(level.load.value)
                p = predicted.get(c)
                if p is None:
                    continue
                tpot_pub = _value(level, Metric.TPOT, q)
                tpot_pt = p.tpot_p50_ms if q is not None else p.tpot_mean_ms
                tpot_rng = getattr(p, "tpot_p50_range_ms" if q is not None else "tpot_mean_range_ms", None)
                if tpot_pub and tpot_pt:
                    cells.append(Cell(family=family, mix=label, interior=interior, metric="TPOT", clients=c,
                                      published=tpot_pub, point=tpot_pt, low=tpot_rng[0] if tpot_rng else None,
                                      high=tpot_rng[1] if tpot_rng else None))  # fmt: skip
                ttft_pub = _value(level, Metric.TTFT, q)
                ttft_pt = p.ttft_p50_ms if q is not None else p.ttft_mean_ms
                ttft_rng = p.ttft_p50_range_ms if q is not None else p.ttft_mean_range_ms
                if ttft_pub and ttft_pt:
                    cells.append(Cell(family=family, mix=label, interior=interior, metric="TTFT", clients=c,
                                      published=ttft_pub, point=ttft_pt, low=ttft_rng[0] if ttft_rng else None,
                                      high=ttft_rng[1] if ttft_rng else None))  # fmt: skip
    return cells, cases


def _mean_tokens(results: Results, which: str) -> float:
    value = mean_prompt_tokens(results.levels) if which == "prompt" else mean_output_tokens(results.levels)
    assert value is not None
    return value


def _crossing(tpots: list[tuple[float, float]], slo: float) -> float:
    """The batch at which the published TPOT crosses ``slo`` (linear between levels)."""
    for (b0, v0), (b1, v1) in itertools.pairwise(tpots):
        if v0 <= slo <= v1 and v1 > v0:
            return b0 + (b1 - b0) * (slo - v0) / (v1 - v0)
    return tpots[-1][0]


def _summary(cells: list[Cell], cases: list[BatchCase]) -> None:
    print()
    print(f"{'metric':6} {'where':9} {'cells':>5} {'inside':>7} {'med |err|':>9} {'med half-width':>14}")
    for metric in ("TPOT", "TTFT"):
        for where, pick in (("all", lambda c: True), ("interior", lambda c: c.interior)):
            chosen = [c for c in cells if c.metric == metric and pick(c)]
            if not chosen:
                continue
            inside = sum(c.inside for c in chosen) / len(chosen)
            err = statistics.median(abs(c.error) for c in chosen)
            widths = [w for c in chosen if (w := c.half_width) is not None]
            width = f"{statistics.median(widths):.1%}" if widths else "-"
            print(f"{metric:6} {where:9} {len(chosen):5d} {inside:7.0%} {err:9.1%} {width:>14}")
    answered = [(c, c.answered) for c in cases if c.answered is not None]
    above = [c for c, batch in answered if batch > c.crossing]
    useless = [c for c, batch in answered if batch < 0.6 * c.crossing]
    print(
        f"\nmax batch: {len(cases)} cases, {len(answered)} answered, {len(above)} above the published crossing, "
        f"{len(useless)} below 60% of it, {len(cases) - len(answered)} unanswered"
    )


def main(argv: list[str]) -> int:
    dirs = tuple(Path(a) for a in argv) or DEFAULT_DIRS
    all_cells: list[Cell] = []
    all_cases: list[BatchCase] = []
    for family, mixes in sorted(families(dirs).items()):
        cells, cases = leave_one_out(family, mixes)
        all_cells += cells
        all_cases += cases
        print(f"\n{family}")
        for mix in dict.fromkeys([c.mix for c in cells] + [c.mix for c in cases]):
            row = [c for c in cells if c.mix == mix]
            for metric in ("TPOT", "TTFT"):
                errs = " ".join(f"{c.error:+.0%}{'' if c.inside else '!'}" for c in row if c.metric == metric)
                print(f"  {mix:>11} {metric}: {errs}")
            for case in (c for c in cases if c.mix == mix):
                flag = " ABOVE" if case.answered is not None and case.answered > case.crossing else ""
                print(
                    f"  {mix:>11} slo {case.slo_ms:.2f} ms: batch {case.answered} (law {case.point}) vs crossing "
                    f"{case.crossing:.1f}{flag}"
                )
                if case.answered is None or case.answered < 0.6 * case.crossing:
                    print(f"{'':16}{case.note}")
    _summary(all_cells, all_cases)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
