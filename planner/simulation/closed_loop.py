"""A closed-loop level served by the simulator's engine, stepped directly in virtual time (pure).

What a closed loop at concurrency c sees for TTFT depends on how each prompt joins a running batch,
which the simulator's engine (``loadgen.engine``: chunked prefill, KV capacity, every term of the
step) reproduces step by step. Here it is stepped without HTTP, as the simulator's driver steps it:
steps back to back, and a client whose answer ended with a step sends its next request after the next
step has begun (the driver starts it before any client reads the last token), so that request waits one
step, as on a server whose engine takes requests in between steps. Tens of milliseconds where the same
level over the simulator's HTTP in virtual time took seconds, so a mix plan can run it at every
calibration level as well as at the levels it predicts.

Lengths are drawn per request as the run asked for them (``LengthSample``). That matters beyond the
means: with fixed lengths, clients whose answers end together send together from then on, so a real
server's noise slowly bunches them (vLLM's CPU build, prompts of 1,024 tokens at c=8: TTFT p50 50, 74
and 98 ms in three runs as fewer, larger groups arrived), while this noiseless engine keeps them as
staggered as they started. Answers of varied length reshuffle the clients every round, on the server
and here alike.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from loadgen.engine import Engine, EngineConfig
from planner.laws.lengthsample import LengthSample

try:  # the same loop in C, built at install where a C compiler is present (setup.py); else the reference
    from planner.simulation import closed_loop_compiled as compiled
except ImportError:
    compiled = None  # type: ignore[assignment]

WARMUP_PER_CLIENT = 2  # requests per client before the measured ones: the batch reaches its steady mix
MEASURED_PER_CLIENT = 12
MIN_MEASURED = 60  # a p95 of at least this many requests
MIN_DRAWN = 480  # where lengths vary, so that a level's p95 rests on its tail's draws, not a few


@dataclass(frozen=True, slots=True, kw_only=True)
class ClosedLevel:
    """Each measured request's TTFT and TPOT at one concurrency."""

    clients: int
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray  # requests of one token have none
    e2e_ms: np.ndarray  # every measured request's, sent to last token
    output_tokens: np.ndarray  # every measured request's

    def tokens_per_s(self) -> float:
        """Output tokens a second the loop drew (Little's law: the clients over the mean E2E, times the mean
        output): a slot also waits out its request's queue and prefill, which a per-step count misses."""
        return float(self.clients * self.output_tokens.sum() * 1000.0 / self.e2e_ms.sum())

    def ttft_ms_at(self, q: float | None) -> float:
        """TTFT's ``q``-th percentile (None: the mean)."""
        return float(np.mean(self.ttft_ms) if q is None else np.percentile(self.ttft_ms, q))

    def tpot_ms_at(self, q: float | None) -> float | None:
        """TPOT's ``q``-th percentile (None: the mean); None where every answer was one token."""
        if not self.tpot_ms.size:
            return None
        return float(np.mean(self.tpot_ms) if q is None else np.percentile(self.tpot_ms, q))


def run_closed_loop(
    engine: EngineConfig, clients: int, lengths: LengthSample, seed: int = 0, *, per_client: int | None = None
) -> ClosedLevel:
    """``clients`` each sending a request drawn from ``lengths`` as soon as the last ended, until every
    client has sent its warm-up and measured share (``per_client`` requests each: a mean's search, not a
    tail); the warm-up is left out. Clients start spread over one request's duration alone (at the mean
    lengths), as ``loadgen`` staggers a closed loop: all at once, fixed lengths would lock them into
    cohorts that prefill and finish together."""
    if clients < 1:
        raise ValueError(f"a closed loop needs clients >= 1, got {clients}")
    warmup = WARMUP_PER_CLIENT * clients
    varied = len(lengths.output_tokens) > 1
    measured = max(MEASURED_PER_CLIENT * clients, MIN_DRAWN if varied else MIN_MEASURED)
    total = warmup + (measured if per_client is None else per_client * clients)
    drawn_prompts, drawn_outputs = lengths.draw(total, np.random.default_rng(seed))
    prompts = np.array([max(round(p), 0) for p in drawn_prompts], dtype=np.int64)  # as ``Engine.submit`` takes them
    outputs = np.array([int(o) for o in drawn_outputs], dtype=np.int64)
    mean = lengths.mix
    ramp_ms = _alone_ms(engine, round(mean.prompt_tokens), max(round(mean.output_tokens), 1))
    starts = np.array([ramp_ms * k / clients for k in range(clients)], dtype=np.float64)
    if compiled is not None and compilable(engine) and outputs.min() >= 1:
        ttft, tpot, e2e, done = compiled.serve(starts, prompts, outputs, warmup, *engine_terms(engine))
    else:
        ttft, tpot, e2e, done = serve_reference(engine, starts, prompts, outputs, warmup)
    return ClosedLevel(clients=clients, ttft_ms=ttft, tpot_ms=tpot, e2e_ms=e2e, output_tokens=done)


def compilable(engine: EngineConfig) -> bool:
    """Whether the compiled loop serves this engine: what a plan fits (continuous batching, no step noise,
    no speculative decoding, no adapters); the reference serves the rest."""
    return (
        engine.mode == "continuous"
        and not engine.noise_cv
        and not engine.spec_draft_tokens
        and not (engine.per_adapter_ms or engine.adapter_load_ms)
    )


def engine_terms(engine: EngineConfig) -> tuple[float, float, float, float, float, int, int, int]:
    """The compiled loop's arguments after the requests (-1: no token budget, no KV capacity)."""
    budget, kv = engine.max_num_batched_tokens, engine.kv_capacity_tokens
    return (
        engine.base_ms, engine.per_seq_ms, engine.per_kv_ms, engine.prefill_ms_per_token,
        engine.prefill_attention_ms, engine.max_num_seqs, -1 if budget is None else budget, -1 if kv is None else kv,
    )  # fmt: skip


def serve_reference(
    engine: EngineConfig, starts: np.ndarray, prompts: np.ndarray, outputs: np.ndarray, warmup: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The closed loop stepped through ``loadgen.engine.Engine`` itself (the compiled loop is held to it):
    each measured request's TTFT, TPOT (two tokens or more), E2E and output tokens, in finishing order.
    The clients first send at ``starts``; each next request in ``prompts``/``outputs`` order is sent by a
    client whose answer ended, once the next step began (the first ``warmup`` are not measured)."""
    sim = Engine(config=engine)
    total, pending = len(prompts), deque(float(t) for t in starts)
    sent_ms: list[float] = []
    first_ms: dict[int, float] = {}
    ttft: list[float] = []
    tpot: list[float] = []
    e2e: list[float] = []
    done_tokens: list[int] = []

    def send(now_ms: float) -> None:
        seq = len(sent_ms)
        sent_ms.append(now_ms)
        sim.submit(seq, prompt_tokens=int(prompts[seq]), max_tokens=int(outputs[seq]), now_ms=now_ms)

    t, ended = 0.0, 0  # ended: clients whose answer ended at t, who send again once the next step began
    while True:
        while pending and pending[0] <= t:
            start = pending.popleft()
            if len(sent_ms) < total:  # a client that starts once every request was sent sends none
                send(start)
        step = sim.next_step(t)
        if ended:
            for _ in range(min(ended, total - len(sent_ms))):
                send(t)
            ended = 0
            if step is None:  # an idle engine wakes for them at once
                step = sim.next_step(t)
        if step is None:
            if not pending:
                return np.array(ttft), np.array(tpot), np.array(e2e), np.array(done_tokens, dtype=np.int64)
            t = pending[0]
            continue
        t = step.end_ms
        for seq in step.emitted:
            first_ms.setdefault(seq, t)
        for seq in step.finished:
            if seq >= warmup:
                ttft.append(first_ms[seq] - sent_ms[seq])
                e2e.append(t - sent_ms[seq])
                done_tokens.append(int(outputs[seq]))
                if outputs[seq] > 1:
                    tpot.append((t - first_ms[seq]) / (int(outputs[seq]) - 1))
            del first_ms[seq]
        ended = len(step.finished)


def _alone_ms(engine: EngineConfig, prompt_tokens: int, output_tokens: int) -> float:
    """How long one request takes on an idle ``engine``: the ramp a closed loop's clients start over (the
    compiled loop's one request where it serves the engine: the same steps, without stepping them in Python)."""
    if compiled is not None and compilable(engine) and output_tokens >= 1:
        prompts, outputs = np.array([prompt_tokens], dtype=np.int64), np.array([output_tokens], dtype=np.int64)
        e2e = compiled.serve(np.zeros(1), prompts, outputs, 0, *engine_terms(engine))[2]
        return float(e2e[0])
    sim = Engine(config=engine)
    sim.submit(0, prompt_tokens=prompt_tokens, max_tokens=output_tokens, now_ms=0.0)
    t = 0.0
    while (step := sim.next_step(t)) is not None:
        t = step.end_ms
    return t
