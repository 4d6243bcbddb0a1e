"""A sans-IO continuous/static batching engine with a known step-latency law.

No sockets and no clock: the caller passes the time (in milliseconds) into
``next_step`` and decides how to wait for the step to end. The simulated
server drives it in real time on absolute deadlines; the planner can drive
the same engine in virtual time.

The law (docs/design.md, "The step law")::

    step_ms = base_ms + per_seq_ms * decode_sequences + per_kv_ms * kv_tokens_read / 1000
            + prefill_ms_per_token * prompt_tokens_prefilled
            + prefill_attention_ms * prefill_token_pairs / 1e6

(a prompt token prefilled attends itself and every token before it: a prompt of P tokens is
P * (P + 1) / 2 pairs, which is attention's share of prefill, the part that grows with P squared).

Multi-LoRA serving adds ``per_adapter_ms`` per distinct adapter in the step
(the adapter kernels' cost grows with the adapters a batch mixes) and
``adapter_load_ms`` for each adapter a step must load first: ``adapter_slots``
adapters are resident at once (vLLM's ``--max-loras``), the least recently
used goes, and a waiting sequence whose adapter would make the running batch
mix more than ``adapter_slots`` is passed over until one leaves, as vLLM's
scheduler does.

Every step decodes one token for every running sequence whose prompt is in.
A prompt is prefilled in the step that admits it, or, with a token budget
(``max_num_batched_tokens``: decode tokens count one each, as in vLLM's
chunked prefill), in chunks over several steps; its first token comes at the
end of its last chunk. A step reads the KV cache of every sequence in it
(prompt and tokens so far). Waiting sequences are admitted first-in
first-out, at most ``max_num_seqs`` at once and, with ``kv_capacity_tokens``,
only while their prompt and output fit beside those running. With the
defaults (no KV term, no budget, no capacity) this is the plain law of docs/design.md.

Static mode, for contrast: collect up to ``static_batch`` waiting sequences
(or whatever has arrived once the oldest has waited ``static_wait_ms``), run
that batch until its longest member finishes, with no refill. Finished
members keep their slot (padding), so they still cost ``per_seq_ms``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from loadgen.choices import Mode


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """The simulated engine's law and limits. Defaults are docs/design.md's worked example."""

    base_ms: float = 25.0
    per_seq_ms: float = 0.4
    prefill_ms_per_token: float = 0.0
    max_num_seqs: int = 128
    mode: Mode = Mode.CONTINUOUS
    static_batch: int = 8  # static mode: batch size to collect
    static_wait_ms: float = 50.0  # static mode: longest wait for a full batch
    noise_cv: float = 0.0  # coefficient of variation of a lognormal step multiplier
    seed: int = 0
    per_kv_ms: float = 0.0  # per thousand KV tokens a step reads (prompt and output so far, every sequence)
    max_num_batched_tokens: int | None = None  # tokens per step (decode one each, prefill chunks); None: no cap
    kv_capacity_tokens: int | None = None  # prompt + output reserved per running sequence; None: unlimited
    # per million (token, earlier token) pairs a prefill attends: attention's share of prefill, which grows
    # with the square of the prompt (a prompt of P tokens attends P * (P + 1) / 2 pairs, however chunked)
    prefill_attention_ms: float = 0.0
    # speculative decoding: each decoding sequence's step verifies this many draft tokens, each accepted
    # with this probability until the first rejection; the step emits 1 + the accepted (its own token
    # and the accepted drafts) in one event, and the law is charged once per verified step
    spec_draft_tokens: int = 0
    spec_acceptance: float = 0.0
    adapter_slots: int = 4  # LoRA adapters resident, and mixed in one batch, at once (vLLM's --max-loras)
    adapter_load_ms: float = 0.0  # added to a step for each adapter it loads (one not resident)
    per_adapter_ms: float = 0.0  # added to a step for each distinct adapter among its sequences

    def __post_init__(self) -> None:
        terms = (self.base_ms, self.per_seq_ms, self.prefill_ms_per_token, self.per_kv_ms, self.prefill_attention_ms)
        if not all(t >= 0 for t in terms):
            raise ValueError(
                "base_ms, per_seq_ms, per_kv_ms, prefill_ms_per_token and prefill_attention_ms must be >= 0"
            )
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must hold a decode token for each of "
                f"max_num_seqs ({self.max_num_seqs}) sequences"
            )
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < 1:
            raise ValueError("kv_capacity_tokens must be >= 1")
        if self.base_ms + self.per_seq_ms <= 0:
            raise ValueError("base_ms + per_seq_ms must be > 0 (a step must take time)")
        if self.max_num_seqs < 1 or self.static_batch < 1:
            raise ValueError("max_num_seqs and static_batch must be >= 1")
        if self.adapter_slots < 1 or self.adapter_load_ms < 0 or self.per_adapter_ms < 0:
            raise ValueError("adapter_slots must be >= 1, adapter_load_ms and per_adapter_ms >= 0")
        if self.spec_draft_tokens < 0 or not 0.0 <= self.spec_acceptance <= 1.0:
            raise ValueError("spec_draft_tokens must be >= 0 and spec_acceptance within 0..1")
        if self.static_wait_ms < 0 or self.noise_cv < 0:
            raise ValueError("static_wait_ms and noise_cv must be >= 0")
        if self.mode not in ("continuous", "static"):
            raise ValueError(f"mode must be 'continuous' or 'static', got {self.mode!r}")

    def capped(self, max_num_seqs: int) -> EngineConfig:
        """This law with its batch capped at ``max_num_seqs`` (its own budget and KV capacity kept: ``serving``)."""
        return self.serving(max_num_seqs, self.max_num_batched_tokens, self.kv_capacity_tokens)

    def serving(
        self, max_num_seqs: int, max_num_batched_tokens: int | None, kv_capacity_tokens: int | None
    ) -> EngineConfig:
        """This law under a server's limits, its token budget raised where it would not hold a decode token for
        each sequence (vLLM refuses a ``--max-num-batched-tokens`` below ``--max-num-seqs``)."""
        budget = max_num_batched_tokens
        return dataclasses.replace(
            self,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=None if budget is None else max(budget, max_num_seqs),
            kv_capacity_tokens=kv_capacity_tokens,
        )

    @property
    def law_text(self) -> str:
        """The law and its limits as a start-up line shows them, every term that is set."""
        law = f"step_ms = {self.base_ms:g} + {self.per_seq_ms:g}*running"
        if self.per_kv_ms:
            law += f" + {self.per_kv_ms:g}*kv_tokens/1000"
        if self.prefill_ms_per_token:
            law += f" + {self.prefill_ms_per_token:g}*prompt_tokens_prefilled"
        if self.prefill_attention_ms:
            law += f" + {self.prefill_attention_ms:g}*prefill_token_pairs/1e6"
        if self.max_num_batched_tokens:
            law += f", {self.max_num_batched_tokens} tokens a step"
        if self.per_adapter_ms or self.adapter_load_ms:
            law += f" + {self.per_adapter_ms:g}*adapters + {self.adapter_load_ms:g}*adapter_loads"
            law += f", {self.adapter_slots} adapter slots"
        if self.kv_capacity_tokens:
            law += f", KV {self.kv_capacity_tokens} tokens"
        return f"{self.mode}, {law}, max_num_seqs={self.max_num_seqs}"

    def step_ms(self, running: int, prefill_tokens: int = 0, kv_tokens: int = 0, prefill_pairs: float = 0) -> float:
        """The noiseless duration of one step decoding ``running`` sequences, prefilling ``prefill_tokens``
        that attend ``prefill_pairs`` (token, earlier token) pairs, and reading ``kv_tokens`` of KV cache."""
        return (
            self.base_ms
            + self.per_seq_ms * running
            + self.per_kv_ms * kv_tokens / 1000.0
            + self.prefill_ms_per_token * prefill_tokens
            + self.prefill_attention_ms * prefill_pairs / 1e6
        )


@dataclass(slots=True, kw_only=True)
class _Sequence:
    seq_id: int
    prompt_tokens: int
    max_tokens: int
    arrival_ms: float
    generated: int = 0
    prefilled: int = 0  # prompt tokens processed so far (chunked prefill)
    admitted_ms: float = 0.0  # the start of the step that admitted it
    adapter: str | None = None  # the LoRA adapter it runs with (None: the base model)

    @property
    def reserved(self) -> int:
        """KV tokens held for it while it runs: its whole prompt and output."""
        return self.prompt_tokens + self.max_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One engine step: when it starts, how long it lasts, who gets a token."""

    start_ms: float
    duration_ms: float
    admitted: tuple[int, ...]  # sequence ids admitted at the start of this step
    emitted: tuple[int, ...]  # sequence ids that receive tokens at the end
    finished: tuple[int, ...]  # sequence ids whose last token is in this step
    running: int  # slots occupied during the step (static mode counts padding)
    counts: tuple[int, ...] = ()  # tokens each of ``emitted`` receives (empty: one each; speculative: 1+)

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.duration_ms


@dataclass(slots=True, kw_only=True)
class EngineCounters:
    """Cumulative engine statistics, exported on ``/metrics``."""

    steps: int = 0
    tokens: int = 0  # useful slot-steps: one generated token each
    prompt_tokens: int = 0  # prompt tokens prefilled
    slot_steps: int = 0  # occupied slots summed over steps (static includes padding)
    admitted: int = 0
    finished: int = 0
    cancelled: int = 0
    # what vLLM's request_queue_time / request_prefill_time histograms sum: arrival to admission (over
    # ``admitted``), admission to the end of the step that samples the first token (over ``first_tokens``)
    queue_ms: float = 0.0
    prefill_ms: float = 0.0
    first_tokens: int = 0
    spec_draft_tokens: int = 0  # speculative decoding: draft tokens verified, and accepted
    spec_accepted_tokens: int = 0
    adapter_loads: int = 0  # LoRA adapters loaded (each one not resident when a sequence needed it)


@dataclass(slots=True, kw_only=True)
class Engine:
    """The batching state machine. Drive it with ``submit`` and ``next_step``."""

    config: EngineConfig
    counters: EngineCounters = field(default_factory=EngineCounters)
    _waiting: deque[_Sequence] = field(default_factory=deque)
    _running: dict[int, _Sequence] = field(default_factory=dict)
    _finishing: list[int] = field(default_factory=list)  # last token in the step under way
    _resident: dict[str, None] = field(default_factory=dict)  # loaded adapters, least recently used first
    _loads: int = 0  # adapters loaded for the step being built
    _rng: np.random.Generator = field(init=False)
    _noise_mu: float = field(init=False)
    _noise_sigma: float = field(init=False)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.config.seed)
        # Lognormal multiplier with mean 1 and the requested CV:
        # sigma^2 = ln(1 + cv^2), mu = -sigma^2 / 2.
        self._noise_sigma = math.sqrt(math.log1p(self.config.noise_cv**2))
        self._noise_mu = -0.5 * self._noise_sigma**2

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def submit(
        self, seq_id: int, *, prompt_tokens: int, max_tokens: int, now_ms: float, adapter: str | None = None
    ) -> None:
        """Queue a sequence (with ``adapter``: a LoRA adapter's). It is admitted at the start of a later step."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self._waiting.append(
            _Sequence(
                seq_id=seq_id,
                prompt_tokens=max(prompt_tokens, 0),
                max_tokens=max_tokens,
                arrival_ms=now_ms,
                adapter=adapter,
            )
        )

    def cancel(self, seq_id: int) -> bool:
        """Drop a sequence whose client went away. Returns whether it was known."""
        if self._running.pop(seq_id, None) is not None:
            self.counters.cancelled += 1
            self._retire([])  # static: the batch may be done once its longest member left
            return True
        for seq in self._waiting:
            if seq.seq_id == seq_id:
                self._waiting.remove(seq)
                self.counters.cancelled += 1
                return True
        return False

    def wake_at_ms(self) -> float | None:
        """When an idle engine should be polled again without a new arrival.

        Only static mode ever waits with work queued (for a batch to fill).
        """
        if self.config.mode == "static" and self._waiting and not self._running:
            return self._waiting[0].arrival_ms + self.config.static_wait_ms
        return None

    def next_step(self, now_ms: float) -> Step | None:
        """Start a step at ``now_ms``, or return None when there is nothing to run yet.

        The step's tokens are accounted immediately; the caller delivers them
        at ``step.end_ms``. Sequences finishing in a step keep their slot
        until it ends (so ``num_running`` during a step is the true batch).
        """
        self._retire(self._finishing)
        self._finishing = []
        admitted = self._admit(now_ms)
        if not self._running:
            return None
        cfg = self.config
        budget = math.inf if cfg.max_num_batched_tokens is None or cfg.mode == "static" else cfg.max_num_batched_tokens
        # decode tokens first, one per sequence whose prompt is in; then prompt chunks in admission order
        emitting = [s for s in self._running.values() if s.prefilled >= s.prompt_tokens and s.generated < s.max_tokens]
        kv_tokens = sum(s.prompt_tokens + s.generated for s in emitting)
        budget -= len(emitting)
        prefill_tokens = 0
        pairs = 0
        for seq in self._running.values():
            if seq.prefilled < seq.prompt_tokens and budget > 0:
                chunk = int(min(seq.prompt_tokens - seq.prefilled, budget))
                pairs += chunk * seq.prefilled + chunk * (chunk + 1) // 2  # each token attends all before it
                seq.prefilled += chunk
                budget -= chunk
                prefill_tokens += chunk
                kv_tokens += seq.prefilled
                if seq.prefilled == seq.prompt_tokens:
                    emitting.append(seq)  # its first token is sampled at the end of its last chunk
        finished: list[int] = []
        first = [s for s in emitting if s.generated == 0]
        counts = [self._verified(seq) for seq in emitting] if cfg.spec_draft_tokens else [1] * len(emitting)
        for seq, n in zip(emitting, counts):
            seq.generated += n
            if seq.generated == seq.max_tokens:
                finished.append(seq.seq_id)
        occupied = len(self._running)
        decoding = occupied if cfg.mode == "static" else len(emitting)  # static: padding slots still cost
        duration = cfg.step_ms(decoding, prefill_tokens, kv_tokens, pairs) * self._noise() + self._adapter_ms()
        self._finishing = finished
        c = self.counters
        c.steps += 1
        c.tokens += sum(counts)
        c.prompt_tokens += prefill_tokens
        c.slot_steps += occupied
        c.admitted += len(admitted)
        c.finished += len(finished)
        c.first_tokens += len(first)
        c.prefill_ms += sum(now_ms + duration - s.admitted_ms for s in first)
        emitted = tuple(s.seq_id for s in emitting)
        spec = tuple(counts) if cfg.spec_draft_tokens else ()
        return Step(
            start_ms=now_ms,
            duration_ms=duration,
            admitted=tuple(admitted),
            emitted=emitted,
            finished=tuple(finished),
            running=occupied,
            counts=spec,
        )

    def _adapter_ms(self) -> float:
        """The step's adapter cost: each distinct adapter in the batch, and each one loaded for it."""
        cfg, loads = self.config, self._loads
        self._loads = 0
        if not (cfg.per_adapter_ms or cfg.adapter_load_ms):
            return 0.0
        mixed = len({s.adapter for s in self._running.values() if s.adapter is not None})
        return cfg.per_adapter_ms * mixed + cfg.adapter_load_ms * loads

    def _verified(self, seq: _Sequence) -> int:
        """Tokens a decoding sequence gets from one speculative step: its own, then each draft token in turn
        while they are accepted (none for a first token, sampled after its prefill; never past max_tokens)."""
        if seq.generated == 0:
            return 1
        accepted = 0
        room = min(self.config.spec_draft_tokens, seq.max_tokens - seq.generated - 1)
        while accepted < room and self._rng.random() < self.config.spec_acceptance:
            accepted += 1
        self.counters.spec_draft_tokens += room  # the drafts verified (none past the answer's end)
        self.counters.spec_accepted_tokens += accepted
        return 1 + accepted

    def _admit(self, now_ms: float) -> list[int]:
        cfg = self.config
        if cfg.mode == "continuous":
            n = min(cfg.max_num_seqs - len(self._running), len(self._waiting))
        elif self._running:
            return []  # static: no refill while a batch runs
        else:
            size = min(cfg.static_batch, cfg.max_num_seqs)
            ready = len(self._waiting) >= size or (
                bool(self._waiting) and now_ms >= self._waiting[0].arrival_ms + cfg.static_wait_ms
            )
            n = min(size, len(self._waiting)) if ready else 0
        admitted: list[int] = []
        capacity = cfg.kv_capacity_tokens
        reserved = sum(s.reserved for s in self._running.values()) if capacity is not None else 0
        mixed = {s.adapter for s in self._running.values() if s.adapter is not None}
        passed_over: list[_Sequence] = []  # their adapter would mix one too many: they keep their place
        while len(admitted) < n and self._waiting:
            head = self._waiting[0]
            if capacity is not None and self._running and reserved + head.reserved > capacity:
                break  # it waits for KV space (one too large for the cache runs alone)
            seq = self._waiting.popleft()
            if seq.adapter is not None and seq.adapter not in mixed and len(mixed) >= cfg.adapter_slots:
                passed_over.append(seq)
                continue
            if seq.adapter is not None:
                self._load(seq.adapter, mixed)
                mixed.add(seq.adapter)
            seq.admitted_ms = now_ms
            self.counters.queue_ms += now_ms - seq.arrival_ms
            reserved += seq.reserved
            self._running[seq.seq_id] = seq
            admitted.append(seq.seq_id)
        self._waiting.extendleft(reversed(passed_over))
        return admitted

    def _load(self, adapter: str, in_use: set[str]) -> None:
        """Make ``adapter`` resident (most recently used); when it is not, load it in the place of the least
        recently used adapter that no running sequence holds (there is one: the batch mixes fewer than the
        slots when a new adapter is admitted)."""
        if adapter in self._resident:
            del self._resident[adapter]
        else:
            self._loads += 1
            self.counters.adapter_loads += 1
            if len(self._resident) >= self.config.adapter_slots:
                del self._resident[next(a for a in self._resident if a not in in_use)]
        self._resident[adapter] = None

    def _retire(self, finished: list[int]) -> None:
        if self.config.mode == "continuous":
            for seq_id in finished:
                self._running.pop(seq_id, None)  # it may have been cancelled meanwhile
        elif all(s.generated >= s.max_tokens for s in self._running.values()):
            self._running.clear()  # static: the batch ends with its longest member

    def _noise(self) -> float:
        if self.config.noise_cv == 0:
            return 1.0
        return float(self._rng.lognormal(self._noise_mu, self._noise_sigma))
