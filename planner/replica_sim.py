"""One continuous-batching replica in virtual time, advanced event to event (pure).

The law is the simulated server's, in its own config type (``loadgen.sim.engine.EngineConfig``)::

    step_ms = base_ms + per_seq_ms * running + prefill_ms_per_token * prompt tokens admitted in the step

Every step decodes one token per running sequence; at most ``max_num_seqs``
run, the rest wait first-in first-out; a sequence admitted at a step's start
gets its first token at that step's end and leaves after its last one.

The step engine advances one step per call, which costs O(batch) Python work
per step: at a batch of 87 and 200 tokens that is ~17,000 sequence updates
per request. Here the batch is constant between two events (an arrival that
can take a free slot, or a sequence finishing), so all steps up to the next
event are one multiplication. Finishing is tracked by the global step count
at which each sequence ends (a heap), so no per-step bookkeeping remains:
a few heap operations per request. ``tests/planner`` checks it step for step
against ``loadgen.sim.engine.Engine`` and against the M/D/1 queue's exact
mean wait.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.sim.engine import EngineConfig


@dataclass(frozen=True, slots=True)
class Timeline:
    """Per request (in arrival order): arrival, first and last token times, in ms."""

    arrival_ms: np.ndarray
    first_ms: np.ndarray
    last_ms: np.ndarray
    output_tokens: np.ndarray

    @property
    def ttft_ms(self) -> np.ndarray:
        out: np.ndarray = self.first_ms - self.arrival_ms
        return out

    @property
    def tpot_ms(self) -> np.ndarray:
        """Mean decode interval per request; requests with one token have none (NaN)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            out: np.ndarray = np.where(
                self.output_tokens > 1, (self.last_ms - self.first_ms) / np.maximum(self.output_tokens - 1, 1), np.nan
            )
        return out


def simulate(
    law: EngineConfig,
    arrival_ms: npt.ArrayLike,
    output_tokens: npt.ArrayLike,
    prompt_tokens: npt.ArrayLike | None = None,
) -> Timeline:
    """Serve ``arrival_ms`` (sorted) on one replica of ``law`` (the simulated server's own config, continuous
    mode, no noise); every request runs to completion.

    ``output_tokens`` (and ``prompt_tokens``) are per request or one number for all.
    """
    if law.mode != "continuous" or law.noise_cv:
        raise ValueError("the replica simulation runs continuous batching without step noise")
    arrivals = np.asarray(arrival_ms, dtype=np.float64)
    n = len(arrivals)
    if n and np.any(np.diff(arrivals) < 0):
        raise ValueError("arrival_ms must be sorted")
    outs = np.broadcast_to(np.asarray(output_tokens, dtype=np.int64), (n,)).copy()
    if n and outs.min() < 1:
        raise ValueError("every request needs at least one output token")
    prompts = np.broadcast_to(np.asarray(0 if prompt_tokens is None else prompt_tokens, dtype=np.float64), (n,))
    first = np.empty(n)
    last = np.empty(n)
    arr: list[float] = arrivals.tolist()
    out_list: list[int] = outs.tolist()
    prompt_list: list[float] = prompts.tolist()
    base, slope, prefill, cap = law.base_ms, law.per_seq_ms, law.prefill_ms_per_token, law.max_num_seqs
    first_list: list[float] = [0.0] * n
    last_list: list[float] = [0.0] * n
    heap: list[tuple[int, int]] = []  # (global step count at which the sequence has its last token, request)
    push, pop = heapq.heappush, heapq.heappop
    t = 0.0
    steps = 0  # steps completed so far
    nxt = 0  # next request not yet admitted (FIFO: the waiting queue is arrivals[nxt:] up to t)
    while nxt < n or heap:
        if not heap and arr[nxt] > t:
            t = arr[nxt]  # idle until the next arrival
        extra = 0.0
        admitted_from = nxt
        free = cap - len(heap)
        while free and nxt < n and arr[nxt] <= t:
            push(heap, (steps + out_list[nxt], nxt))
            extra += prompt_list[nxt]
            nxt += 1
            free -= 1
        d = base + slope * len(heap)
        d0 = d + prefill * extra if extra else d
        end0 = t + d0
        for i in range(admitted_from, nxt):
            first_list[i] = end0
        j = heap[0][0] - steps  # steps until the next sequence finishes
        if free and nxt < n:
            wait = arr[nxt] - end0  # the arrival joins at the first step start at or after it
            j = min(j, 1 + math.ceil(wait / d)) if wait > 0 else 1
        t = end0 + (j - 1) * d
        steps += j
        while heap and heap[0][0] <= steps:
            last_list[pop(heap)[1]] = t
    first[:] = first_list
    last[:] = last_list
    return Timeline(arrivals, first, last, outs)
