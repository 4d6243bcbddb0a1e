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
in closed form as well. A step that prefills is taken on its own, as the
engine takes it: the token budget (``max_num_batched_tokens``) chunks a long
prompt over several steps, decode tokens first, so the prompts that arrive
together queue behind each other's chunks, and the KV capacity holds a
request back until its prompt and answer fit. The sizing simulation runs the
budget it was given, as the server would. ``tests/planner`` checks it step for
step against ``loadgen.engine.Engine`` and against the M/D/1 queue's exact
mean wait. (One difference: a prompt of no tokens, which the engine decodes at
once, here takes its turn behind the prompts admitted before it.)

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

_REQUEST_BITS = 32  # a heap entry's low bits hold the request's index
_REQUEST_MASK = (1 << _REQUEST_BITS) - 1


@dataclass(frozen=True, slots=True, kw_only=True)
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

    def ttfo_ms(self, reasoning_share: float) -> np.ndarray:
        """Time to each answer's first visible token: its first token, then the reasoning tokens before the
        answer (``reasoning_share`` of its output) at its own mean decode interval."""
        reasoning = np.rint(reasoning_share * self.output_tokens)
        out: np.ndarray = self.ttft_ms + np.where(reasoning > 0, reasoning * np.nan_to_num(self.tpot_ms), 0.0)
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
    mode, no noise; its token budget and KV capacity as it sets them); every request runs to completion.

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
    first, last = serve(
        np.ascontiguousarray(arrivals),
        np.ascontiguousarray(outs),
        np.ascontiguousarray(prompts, dtype=np.float64),
        *law_terms(law),
    )
    return Timeline(arrival_ms=arrivals, first_ms=first, last_ms=last, output_tokens=outs)


def law_terms(law: EngineConfig) -> tuple[float, float, int, float, float, float, float, float]:
    """The loop's arguments after the requests: base, per-sequence, the batch cap, ms per KV token read, ms
    per prefilled token, ms per attended pair, the token budget and the KV capacity (infinite where unset)."""
    return (
        float(law.base_ms),
        float(law.per_seq_ms),
        int(law.max_num_seqs),
        law.per_kv_ms / 1000.0,
        float(law.prefill_ms_per_token),
        law.prefill_attention_ms / 1e6,
        math.inf if law.max_num_batched_tokens is None else float(law.max_num_batched_tokens),
        math.inf if law.kv_capacity_tokens is None else float(law.kv_capacity_tokens),
    )


def serve_reference(
    arrivals: np.ndarray,
    outs: np.ndarray,
    prompts: np.ndarray,
    base: float,
    slope: float,
    cap: int,
    g: float,
    per_token: float,
    per_pair: float,
    budget: float,
    kv_capacity: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(first token ms, last token ms) per request: the event loop, in Python (the reference).

    A step that prefills (a prompt admitted, or one still being chunked) is taken alone, as the engine takes
    it; between prefills every sequence decodes, the batch is constant up to the next event, and those steps
    are one jump. ``planner.simulation.replica_sim_compiled.serve`` is this loop in C, held to the same
    timelines bit for bit."""
    loop = _Loop(arrivals.tolist(), outs.tolist(), prompts.tolist())
    loop.base, loop.slope, loop.cap, loop.g = base, slope, cap, g
    loop.per_token, loop.per_pair, loop.budget, loop.kv_capacity = per_token, per_pair, budget, kv_capacity
    n = len(arrivals)
    while loop.nxt < n or loop.running:
        loop.admit()
        if loop.head < loop.nxt:
            loop.prefill_step()
        else:
            loop.decode_jump()
        loop.retire()
    return np.asarray(loop.first, dtype=np.float64), np.asarray(loop.last, dtype=np.float64)


class _Loop:
    """The reference loop's state: the law's terms, the clock, the slots, the heap of decoding sequences and
    the prefill queue.

    Prefill completes in admission order, so the prompts in prefill are the requests from ``head`` up to
    ``nxt`` (the next not yet admitted), and only the first of them can be part done (``done_tokens``)."""

    base = slope = g = per_token = per_pair = budget = kv_capacity = 0.0  # the law: ``serve_reference`` sets them
    cap = 0

    def __init__(self, arr: list[float], outs: list[int], prompts: list[float]) -> None:
        n = len(arr)
        self.arr, self.outs, self.prompts = arr, outs, prompts
        self.first, self.last, self.started_at = [0.0] * n, [0.0] * n, [0] * n
        self.heap: list[int] = []  # decoding sequences as (step of their last token) << 32 | request
        self.t, self.steps = 0.0, 0  # the clock (ms), steps completed so far
        self.running, self.decoding = 0, 0  # sequences holding a slot; those of them past their prefill
        self.reserved = 0.0  # KV tokens the running sequences hold (prompt and whole answer)
        self.kv_base = 0.0  # over decoding sequences, prompt - first-token step: step s reads kv_base + decoding * s
        self.nxt = 0  # next request not yet admitted (FIFO: the waiting queue is arr[nxt:] up to t)
        self.head, self.done_tokens = 0, 0.0  # the first request still in prefill, and its tokens prefilled

    def admit(self) -> None:
        """Idle until the next arrival if nothing runs; take the waiting requests that have a slot and KV room."""
        arr, n = self.arr, len(self.arr)
        if not self.running and arr[self.nxt] > self.t:
            self.t = arr[self.nxt]
        while (
            self.running < self.cap
            and self.nxt < n
            and arr[self.nxt] <= self.t
            and (not self.running or self.reserved + self.prompts[self.nxt] + self.outs[self.nxt] <= self.kv_capacity)
        ):
            self.reserved += self.prompts[self.nxt] + self.outs[self.nxt]
            self.nxt += 1
            self.running += 1

    def prefill_step(self) -> None:
        """One step: a decode token for every decoding sequence, then prompt chunks in admission order in what
        the budget leaves; a prompt whose last chunk is in gets its first token at the step's end."""
        prompts, head, done = self.prompts, self.head, self.done_tokens
        left = self.budget - self.decoding
        kv = self.kv_base + self.decoding * self.steps
        tokens, pairs, first_of = 0.0, 0.0, head
        while head < self.nxt and left > 0:
            chunk = min(prompts[head] - done, left)
            pairs += chunk * done + chunk * (chunk + 1) / 2  # each token attends all before it
            done += chunk
            left -= chunk
            tokens += chunk
            kv += done
            if done < prompts[head]:
                break
            heapq.heappush(self.heap, (self.steps + self.outs[head]) << _REQUEST_BITS | head)
            self.started_at[head] = self.steps
            self.kv_base += prompts[head] - self.steps
            self.decoding += 1
            head += 1
            done = 0.0
        self.head, self.done_tokens = head, done
        self.t += self.base + self.slope * self.decoding + self.g * kv + self.per_token * tokens + self.per_pair * pairs
        for i in range(first_of, head):
            self.first[i] = self.t
        self.steps += 1

    def decode_jump(self) -> None:
        """Every running sequence decodes: run the steps up to the next event (a sequence's last token, or the
        step start at which the next arrival with room joins) at once."""
        running, steps, g, nxt = self.running, self.steps, self.g, self.nxt
        d = self.base + self.slope * running
        grow = 0.0
        if g:
            d += g * (self.kv_base + running * steps)
            grow = g * running / 2  # a step reads ``running`` more KV tokens than the one before it
        end0 = self.t + d
        j = (self.heap[0] >> _REQUEST_BITS) - steps  # steps until the next sequence finishes
        if (
            running < self.cap
            and nxt < len(self.arr)
            and self.reserved + self.prompts[nxt] + self.outs[nxt] <= self.kv_capacity
        ):
            wait = self.arr[nxt] - end0  # the arrival joins at the first step start at or after it
            if wait <= 0:
                j = 1
            else:
                cover = 1 + (_steps_to_cover(wait, d, grow) if grow else math.ceil(wait / d))
                j = min(j, cover)
        m = j - 1
        self.t = end0 + m * d + (grow * m * (m + 1) if grow else 0.0)
        self.steps += j

    def retire(self) -> None:
        """The sequences whose last token came in the steps just run leave (their slot frees at the next step)."""
        heap = self.heap
        while self.decoding and heap[0] >> _REQUEST_BITS <= self.steps:
            done = heapq.heappop(heap) & _REQUEST_MASK
            self.running -= 1
            self.decoding -= 1
            self.last[done] = self.t
            self.reserved -= self.prompts[done] + self.outs[done]
            self.kv_base -= self.prompts[done] - self.started_at[done]


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
