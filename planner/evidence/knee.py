"""Saturation: classify levels unsaturated / knee / saturated from independent signals (pure).

Past the server's effective maximum batch B, more clients only queue: the
batch stops growing, throughput plateaus, TTFT grows by about ``1/X`` per
added client (Little's law), and the server reports a waiting queue. A level
is saturated when at least two available signals agree (or the only one
available does); saturation is sticky (every later level is saturated too).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

from planner.evidence.observations import LevelObservation

State = Literal["unsaturated", "knee", "saturated"]
GROWTH_SHARE = 0.25  # grew by less than a quarter of the load increase: a plateau
TTFT_FACTOR = 3.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Saturation:
    states: tuple[State, ...]
    signals: tuple[tuple[str, ...], ...]  # per level: the signals that fired
    max_batch: float | None  # B: the batch plateau (None: no saturation seen)
    agreed: tuple[str, ...]  # signals that fired on the saturated levels

    @property
    def unsaturated(self) -> list[int]:
        """Indices of levels on the law's line (unsaturated and knee)."""
        return [i for i, s in enumerate(self.states) if s != "saturated"]


def _plateau(prev: float | None, cur: float | None, load_growth: float) -> bool | None:
    if prev is None or cur is None or prev <= 0:
        return None
    return cur < prev * (1 + GROWTH_SHARE * load_growth)


def classify(levels: tuple[LevelObservation, ...], *, batch_is_concurrency: bool) -> Saturation:
    states: list[State] = []
    signals: list[tuple[str, ...]] = []
    base_ttft = levels[0].ttft_p50_ms if levels else None
    saturated = False
    for i, lv in enumerate(levels):
        fired: dict[str, bool | None] = {}
        if i > 0:
            prev = levels[i - 1]
            growth = lv.concurrency / prev.concurrency - 1 if prev.concurrency > 0 else 0.0
            if growth > 0.1:
                if not batch_is_concurrency:
                    fired["batch plateau"] = _plateau(prev.batch, lv.batch, growth)
                fired["throughput plateau"] = _plateau(prev.tokens_per_s, lv.tokens_per_s, growth)
                fired["TTFT grows ~1/X per client"] = _ttft_queue(prev, lv, base_ttft)
        if lv.server_waiting is not None:
            fired["server queue"] = lv.server_waiting > max(1.0, 0.1 * lv.batch)
        available = {k: v for k, v in fired.items() if v is not None}
        yes = tuple(k for k, v in available.items() if v)
        saturated = saturated or (len(yes) >= 2 or (len(available) == 1 and len(yes) == 1))
        states.append("saturated" if saturated else "unsaturated")
        signals.append(yes)
    first = states.index("saturated") if "saturated" in states else None
    if first is not None and first > 0:
        states[first - 1] = "knee"
    max_batch = None
    agreed: tuple[str, ...] = ()
    if first is not None:
        sat = [levels[i].batch for i in range(first, len(levels))]
        max_batch = statistics.median(sat)
        agreed = tuple(dict.fromkeys(s for i in range(first, len(levels)) for s in signals[i]))
    return Saturation(states=tuple(states), signals=tuple(signals), max_batch=max_batch, agreed=agreed)


def _ttft_queue(prev: LevelObservation, cur: LevelObservation, base_ttft: float | None) -> bool | None:
    if None in (prev.ttft_p50_ms, cur.ttft_p50_ms, base_ttft) or not cur.requests_per_s:
        return None
    assert prev.ttft_p50_ms is not None and cur.ttft_p50_ms is not None and base_ttft is not None
    dc = cur.concurrency - prev.concurrency
    if dc <= 0:
        return None
    per_client_s = (cur.ttft_p50_ms - prev.ttft_p50_ms) / 1000.0 / dc
    expected = 1.0 / cur.requests_per_s
    return 0.5 * expected <= per_client_s <= 2.0 * expected and cur.ttft_p50_ms > TTFT_FACTOR * base_ttft
