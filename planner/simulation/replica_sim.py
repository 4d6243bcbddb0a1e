"""One continuous-batching replica in virtual time, advanced event to event (pure).

The law is the simulated server's, in its own config type (``loadgen.engine.EngineConfig``)::

    step_ms = base_ms + per_seq_ms * running + per_kv_ms * KV tokens read / 1000
            + prefill_ms_per_token * prompt tokens admitted in the step
            + prefill_attention_ms * their (token, earlier token) pairs / 1e6

Every step decodes one token per running sequence; at most ``max_num_seqs``
run, the rest wait first-in first-out; a sequence admitted at a step's start
gets its first token at that step's end and leaves after its last one.

The step engine advances one step per call, which costs O(batch) Python work
per step: at a batch of 87 and 200 tokens that is ~17,000 sequence updates
per request. Here the batch is constant between two events (an arrival that
can take a free slot, or a sequence finishing), so all steps up to the next
event are one multiplication. Finishing is tracked by the global step count
at which each sequence ends (a heap), so no per-step bookkeeping remains:
a few heap operations per request. The KV a step reads grows by the batch
each step, so the steps between two events form an arithmetic series, summed
in closed form as well. Chunked prefill and a KV limit are not modelled here.
``tests/planner`` checks it step for step against ``loadgen.engine.Engine``
and against the M/D/1 queue's exact mean wait.

The loop itself (``serve_reference``) also exists compiled
(``replica_sim_compiled.pyx``, ~50x faster), built at install where a C
compiler is present; a property test holds the two to the same timelines,
bit for bit, and ``simulate`` runs the compiled one when it was built.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.engine import EngineConfig
from planner.laws.stepmodel import prompt_pairs

_REQUEST_BITS = 32  # a heap entry's low bits hold the request's index
_REQUEST_MASK = (1 << _REQUEST_BITS) - 1


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
    if n > _REQUEST_MASK:
        raise ValueError(f"at most {_REQUEST_MASK} requests per simulation")
    outs = np.broadcast_to(np.asarray(output_tokens, dtype=np.int64), (n,)).copy()
    if n and outs.min() < 1:
        raise ValueError("every request needs at least one output token")
    prompts = np.broadcast_to(np.asarray(0 if prompt_tokens is None else prompt_tokens, dtype=np.float64), (n,))
    if law.max_num_batched_tokens is not None or law.kv_capacity_tokens is not None:
        raise ValueError("the replica simulation prefills a prompt in the step that admits it, with no KV limit")
    # each request's prefill, paid in the step that admits it (a prompt of P tokens attends P(P+1)/2 pairs)
    prefill = law.prefill_ms_per_token * prompts + law.prefill_attention_ms * prompt_pairs(prompts) / 1e6
    first, last = serve(
        np.ascontiguousarray(arrivals),
        np.ascontiguousarray(outs),
        np.ascontiguousarray(prompts),
        np.ascontiguousarray(prefill, dtype=np.float64),
        float(law.base_ms),
        float(law.per_seq_ms),
        int(law.max_num_seqs),
        law.per_kv_ms / 1000.0,  # ms per KV token a step reads
    )
    return Timeline(arrivals, first, last, outs)


def serve_reference(
    arrivals: np.ndarray,
    outs: np.ndarray,
    prompts: np.ndarray,
    prefill: np.ndarray,
    base: float,
    slope: float,
    cap: int,
    g: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(first token ms, last token ms) per request: the event loop, in Python (the reference).

    ``planner.simulation.replica_sim_compiled.serve`` is this loop in C, held to the same timelines bit for bit."""
    n = len(arrivals)
    arr, out_list, prompt_list, prefill_list = arrivals.tolist(), outs.tolist(), prompts.tolist(), prefill.tolist()
    first_list, last_list, admitted_at = [0.0] * n, [0.0] * n, [0] * n
    heap: list[int] = []  # running sequences as (step of their last token) << 32 | request: an int compares fastest
    push, pop, ceil = heapq.heappush, heapq.heappop, math.ceil
    t, steps, running = 0.0, 0, 0  # the clock (ms), steps completed so far, sequences running
    kv_base = 0.0  # sum over running sequences of prompt - admission step: step s reads kv_base + running * s
    nxt = 0  # next request not yet admitted (FIFO: the waiting queue is arrivals[nxt:] up to t)
    while nxt < n or running:
        if not running and arr[nxt] > t:
            t = arr[nxt]  # idle until the next arrival
        extra, admitted_from = 0.0, nxt
        while running < cap and nxt < n and arr[nxt] <= t:
            push(heap, (steps + out_list[nxt]) << _REQUEST_BITS | nxt)
            extra += prefill_list[nxt]
            admitted_at[nxt] = steps
            kv_base += prompt_list[nxt] - steps
            nxt += 1
            running += 1
        d = base + slope * running
        grow = 0.0
        if g:
            d += g * (kv_base + running * steps)
            grow = g * running / 2  # a step reads ``running`` more KV tokens than the one before it
        end0 = t + d + extra
        if nxt - admitted_from == 1:
            first_list[admitted_from] = end0
        elif nxt > admitted_from:
            first_list[admitted_from:nxt] = [end0] * (nxt - admitted_from)
        j = (heap[0] >> _REQUEST_BITS) - steps  # steps until the next sequence finishes
        if running < cap and nxt < n:
            wait = arr[nxt] - end0  # the arrival joins at the first step start at or after it
            if wait <= 0:
                j = 1
            else:
                cover = 1 + (_steps_to_cover(wait, d, grow) if grow else ceil(wait / d))
                if cover < j:
                    j = cover
        m = j - 1
        t = end0 + m * d + (grow * m * (m + 1) if grow else 0.0)
        steps += j
        while running and heap[0] >> _REQUEST_BITS <= steps:
            done = pop(heap) & _REQUEST_MASK
            running -= 1
            last_list[done] = t
            kv_base -= prompt_list[done] - admitted_at[done]
    return np.asarray(first_list, dtype=np.float64), np.asarray(last_list, dtype=np.float64)


def _steps_to_cover(wait: float, d: float, grow: float) -> int:
    """The fewest steps m >= 1 after the current one whose total ``m * d + grow * m * (m + 1)`` reaches
    ``wait`` (step k lasts ``d + 2 * grow * k``: each reads the KV the running sequences added; without
    KV growth it is ``ceil(wait / d)``, computed inline by the caller)."""
    b = d + grow
    m = max(1, math.ceil((-b + math.sqrt(b * b + 4 * grow * wait)) / (2 * grow)))
    while m > 1 and (m - 1) * d + grow * (m - 1) * m >= wait:
        m -= 1
    while m * d + grow * m * (m + 1) < wait:
        m += 1
    return m


try:  # the same loop in C, built at install where a C compiler is present (setup.py); else the reference
    from planner.simulation.replica_sim_compiled import serve
except ImportError:
    serve = serve_reference

COMPILED = serve is not serve_reference  # which loop ``simulate`` runs (the timelines are the same)
