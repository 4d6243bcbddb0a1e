"""The simulator's OpenAI-compatible routes, on aiohttp.web.

Routes: ``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/completions``, ``POST /v1/responses`` (streaming and not),
``POST /v1/embeddings`` and ``POST /v1/rerank`` (``loadgen.sim.pooling``),
``GET /metrics`` (Prometheus text) and ``GET /health``.

aiohttp serves the simulator because the client side already depends on it
(httpx's API over aiohttp's transport): one well-kept HTTP stack, no extra
dependency, and it streams thousands of small chunks per second on one core.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import web

from loadgen.api import Api
from loadgen.choices import Mode
from loadgen.engine import EngineConfig
from loadgen.sim.driver import EngineDriver
from loadgen.sim.faults import Fault, FaultConfig
from loadgen.sim.framing import (
    BadRequest,
    ChunkFramer,
    ResponsesFramer,
    SimRequest,
    Tokenizer,
    completion_body,
    error_body,
    output_text,
    parse_request,
)
from loadgen.sim.pooling import parse_pooling, pooling_body
from loadgen.sim.prefix_cache import BLOCK_TOKENS, PrefixCache

METRIC_PREFIX = "loadgen_sim:"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True, kw_only=True)
class SimOptions:
    """Everything that shapes the simulator's behaviour."""

    engine: EngineConfig = field(default_factory=EngineConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    model: str = "sim-model"
    merge_prob: float = 0.0  # chance a token is held back and sent with the next one
    default_max_tokens: int = 16
    api_key: str | None = None  # when set, /v1 routes answer 401 without "Authorization: Bearer <key>"
    stall_ms: float = 1000.0  # how long the "stall" fault pauses a stream
    max_model_len: int = 131_072  # prompt + output tokens per request, as an engine's context limit
    tokenizer: Tokenizer = field(default_factory=Tokenizer)  # how prompts are counted in usage
    prefix_cache: bool = True  # prompt blocks seen before cost no prefill (as vLLM's default)
    # a reasoning model (chat): each answer's first tokens stream as reasoning, counted as completion tokens
    reasoning_tokens: int = 0
    tool_call_share: float = 0.0  # an agent's traffic (chat): the share of turns answered with a tool call
    # LoRA adapters served beside ``model`` under their own names (vLLM's --lora-modules): a request naming one
    # runs with it (the engine's adapter slots, load and mixing costs)
    lora_modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 0.0 <= self.merge_prob < 1.0:
            raise ValueError(f"merge_prob must be in [0, 1), got {self.merge_prob}")
        if self.reasoning_tokens < 0:
            raise ValueError(f"reasoning_tokens must be >= 0, got {self.reasoning_tokens}")
        if not 0.0 <= self.tool_call_share <= 1.0:
            raise ValueError(f"tool_call_share must be in [0, 1], got {self.tool_call_share}")
        if self.max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1, got {self.max_model_len}")

    def to_json(self) -> dict[str, Any]:
        """Every option, as the simulator child reads them (``python -m loadgen.sim``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SimOptions:
        engine, faults, tokenizer = raw["engine"], raw["faults"], raw["tokenizer"]
        rest = {key: value for key, value in raw.items() if key not in ("engine", "faults", "tokenizer")}
        rest["lora_modules"] = tuple(rest.get("lora_modules", ()))  # JSON holds the tuple as a list
        return cls(
            engine=EngineConfig(**{**engine, "mode": Mode(engine["mode"])}),  # JSON holds the mode as text
            faults=FaultConfig(**faults),
            tokenizer=Tokenizer(**tokenizer),
            **rest,
        )


DRIVER_KEY = web.AppKey("driver", EngineDriver)
OPTIONS_KEY = web.AppKey("options", SimOptions)
RNG_KEY = web.AppKey("rng", np.random.Generator)
CACHE_KEY = web.AppKey("prefix_cache", PrefixCache)


def build_app(options: SimOptions) -> web.Application:
    """An aiohttp application serving one simulated model."""
    app = web.Application(middlewares=[_auth] if options.api_key else [])
    app[OPTIONS_KEY] = options
    app[RNG_KEY] = np.random.default_rng(options.engine.seed + 1)
    kv = options.engine.kv_capacity_tokens
    app[CACHE_KEY] = PrefixCache(capacity_blocks=(kv or 1_048_576) // BLOCK_TOKENS)  # at most what the KV holds
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/responses", _responses)
    app.router.add_post("/v1/embeddings", _embeddings)
    app.router.add_post("/v1/rerank", _rerank)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/health", _health)
    app.cleanup_ctx.append(_engine_loop)
    return app


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    key = request.app[OPTIONS_KEY].api_key
    if request.path.startswith("/v1/") and request.headers.get("Authorization") != f"Bearer {key}":
        return _error("invalid API key", 401)
    return await handler(request)


async def _engine_loop(app: web.Application) -> AsyncIterator[None]:
    driver = EngineDriver(app[OPTIONS_KEY].engine)
    app[DRIVER_KEY] = driver
    task = asyncio.create_task(driver.run(), name="sim-engine")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _models(request: web.Request) -> web.Response:
    """The base model, then each adapter with the base as its parent (as vLLM lists LoRA modules)."""
    options = request.app[OPTIONS_KEY]
    created = int(time.time())
    base = {"id": options.model, "object": "model", "created": created, "owned_by": "loadgen-sim", "parent": None}
    adapters = [{**base, "id": name, "parent": options.model} for name in options.lora_modules]
    return web.json_response({"object": "list", "data": [base, *adapters]})


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="")


async def _metrics(request: web.Request) -> web.Response:
    driver = request.app[DRIVER_KEY]
    engine, c, cache = driver.engine, driver.engine.counters, request.app[CACHE_KEY]
    label = f'{{model_name="{request.app[OPTIONS_KEY].model}"}}'
    rows = [
        ("num_requests_running", "gauge", "Sequences in the running batch.", engine.num_running),
        ("num_requests_waiting", "gauge", "Sequences waiting for a slot.", engine.num_waiting),
        ("steps_total", "counter", "Engine steps run.", c.steps),
        (
            "adapter_loads_total",
            "counter",
            "LoRA adapters loaded (not resident when a sequence needed one).",
            c.adapter_loads,
        ),
        ("generation_tokens_total", "counter", "Tokens generated (useful slot-steps).", c.tokens),
        ("prompt_tokens_total", "counter", "Prompt tokens prefilled.", c.prompt_tokens),
        ("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", cache.queried_tokens),
        (
            "prefix_cache_hits_total",
            "counter",
            "Prompt tokens found in the prefix cache (no prefill).",
            cache.hit_tokens,
        ),
        (
            "spec_decode_num_draft_tokens_total",
            "counter",
            "Draft tokens verified (speculative decoding).",
            c.spec_draft_tokens,
        ),
        (
            "spec_decode_num_accepted_tokens_total",
            "counter",
            "Draft tokens accepted (speculative decoding).",
            c.spec_accepted_tokens,
        ),
        ("slot_steps_total", "counter", "Occupied slots summed over steps (static mode counts padding).", c.slot_steps),
        (
            "engine_overruns_total",
            "counter",
            "Steps that started late: the simulator missed its law.",
            driver.stats.overruns,
        ),
        ("engine_max_late_ms", "gauge", "Worst lateness of a step start, in ms.", round(driver.stats.max_late_ms, 3)),
        (
            "engine_token_gap_ms_total",
            "counter",
            "Time between a stream's tokens of back-to-back steps, summed over streams: the steps as realised, in ms.",
            round(driver.stats.gap_ms_total, 3),
        ),
        (
            "engine_token_gaps_total",
            "counter",
            "Token gaps in engine_token_gap_ms_total (a stream with a token in both of two back-to-back steps).",
            driver.stats.gaps,
        ),
    ]
    # per-request times as vLLM names them (histograms there; only their sum and count here)
    summaries = [
        ("request_queue_time_seconds", "From arrival to admission into the batch.", c.queue_ms, c.admitted),
        (
            "request_prefill_time_seconds",
            "From admission to the end of the step that samples the first token.",
            c.prefill_ms,
            c.first_tokens,
        ),
    ]
    lines = []
    for name, kind, doc, value in rows:
        lines += [f"# HELP {METRIC_PREFIX}{name} {doc}", f"# TYPE {METRIC_PREFIX}{name} {kind}"]
        lines.append(f"{METRIC_PREFIX}{name}{label} {value}")
    for name, doc, total_ms, count in summaries:
        lines += [f"# HELP {METRIC_PREFIX}{name} {doc}", f"# TYPE {METRIC_PREFIX}{name} summary"]
        lines.append(f"{METRIC_PREFIX}{name}_sum{label} {round(total_ms / 1000, 6)}")
        lines.append(f"{METRIC_PREFIX}{name}_count{label} {count}")
    if (kv := driver.engine.config.kv_capacity_tokens) is not None:  # as vLLM's cache_config_info says it
        name = f"{METRIC_PREFIX}cache_config_info"
        lines += [f"# HELP {name} The KV cache's configuration, in its labels.", f"# TYPE {name} gauge"]
        lines.append(f'{name}{{kv_cache_size_tokens="{kv}"}} 1.0')
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _complete(request, Api.CHAT)


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, Api.COMPLETIONS)


async def _responses(request: web.Request) -> web.StreamResponse:
    return await _complete(request, Api.RESPONSES)


async def _embeddings(request: web.Request) -> web.StreamResponse:
    return await _pool(request, Api.EMBEDDINGS)


async def _rerank(request: web.Request) -> web.StreamResponse:
    return await _pool(request, Api.RERANK)


async def _pool(request: web.Request, api: Api) -> web.StreamResponse:
    """A pooling batch (``loadgen.sim.pooling``): each input a prefill-only sequence, answered when all are done."""
    options = request.app[OPTIONS_KEY]
    body = await _body(request)
    if body is None:
        return web.Response()
    try:
        req = parse_pooling(body, api, options.model, options.max_model_len, options.tokenizer, options.lora_modules)
    except BadRequest as exc:
        return _error(str(exc), exc.status)
    if (rejected := _rejected(request, options.faults.draw(request.app[RNG_KEY]))) is not None:
        return rejected
    driver = request.app[DRIVER_KEY]
    adapter = req.model if req.model != options.model else None
    submitted = [driver.submit(prompt_tokens=t, max_tokens=1, adapter=adapter) for t in req.input_tokens]
    try:
        for _, pooled in submitted:
            await pooled.get()
    finally:
        for seq_id, _ in submitted:
            driver.release(seq_id)
    prefix = "embd-" if api is Api.EMBEDDINGS else "rerank-"
    return web.json_response(pooling_body(req, prefix + _base_id(request), int(time.time())))


def _base_id(request: web.Request) -> str:
    """The response's id after its API's prefix: as vLLM does, the client's X-Request-Id where it sent one."""
    return request.headers.get("X-Request-Id", "")[:128] or uuid.uuid4().hex


async def _body(request: web.Request) -> bytes | None:
    """The request's body; None when the client left before it arrived: nothing to answer, nothing to log (a
    load tester's clients are cut off all the time; aiohttp would print a traceback)."""
    try:
        return await request.read()
    except ConnectionResetError:
        return None


def _rejected(request: web.Request, fault: Fault | None) -> web.Response | None:
    """A fault that answers instead of the model (an HTTP error, or the connection reset before any byte)."""
    if fault in REJECTIONS:
        message, status, headers = REJECTIONS[fault]
        return _error(message, status, headers)
    if fault is Fault.RESET:
        assert request.transport is not None
        request.transport.abort()
        return web.Response()
    return None


def _error(message: str, status: int, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(error_body(message, status), status=status, headers=headers)


async def _complete(request: web.Request, api: Api) -> web.StreamResponse:
    options = request.app[OPTIONS_KEY]
    body = await _body(request)
    if body is None:
        return web.Response()
    try:
        req = parse_request(
            body,
            api,
            options.model,
            options.default_max_tokens,
            options.max_model_len,
            options.tokenizer,
            options.lora_modules,
        )
    except BadRequest as exc:
        return _error(str(exc), exc.status)
    rng = request.app[RNG_KEY]
    fault = options.faults.draw(rng)
    if (rejected := _rejected(request, fault)) is not None:
        return rejected
    driver = request.app[DRIVER_KEY]
    request_id = {Api.CHAT: "chatcmpl-", Api.COMPLETIONS: "cmpl-", Api.RESPONSES: "resp_"}[api] + _base_id(request)
    created = int(time.time())
    cache = request.app[CACHE_KEY] if options.prefix_cache else None
    per_word = options.tokenizer.per_word
    if cache is not None and (cached := cache.lookup(req.words, req.prompt_tokens, per_word, req.model)):
        req = dataclasses.replace(req, cached_tokens=cached)
    adapter = req.model if req.model != options.model else None
    seq_id, tokens = driver.submit(
        prompt_tokens=req.prompt_tokens - req.cached_tokens, max_tokens=req.max_tokens, adapter=adapter
    )
    if cache is not None:
        # the prompt's blocks, and with them the answer's (its text is a function of its length): remembered
        # before it is sent, so a client that asks its next turn the moment [DONE] arrives always finds them
        cache.remember([*req.words, *output_text(0, req.max_tokens).split()], req.model)
    try:
        if not req.stream:
            for _ in range(req.max_tokens):
                await tokens.get()
            response: web.StreamResponse = web.json_response(completion_body(req, request_id, created))
        else:
            merge = options.merge_prob if options.merge_prob > 0 else 0.0
            framer: ChunkFramer | ResponsesFramer = (
                ResponsesFramer(req, request_id, created)
                if api is Api.RESPONSES
                else ChunkFramer(req, request_id, created)
            )
            shape = _answer_shape(options, req, rng)
            response = await _stream(request, req, framer, tokens, fault, rng, merge, options.stall_ms, shape)
        return response
    finally:
        driver.release(seq_id)


async def _stream(
    request: web.Request,
    req: SimRequest,
    framer: ChunkFramer | ResponsesFramer,
    tokens: asyncio.Queue[int],
    fault: Fault | None,
    rng: np.random.Generator,
    merge_prob: float,
    stall_ms: float,
    shape: AnswerShape | None = None,
) -> web.StreamResponse:
    shape = shape or AnswerShape()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    write = _trickle(resp) if fault is Fault.TRICKLE else resp.write
    half = req.max_tokens // 2
    sent = pending = 0
    try:
        while sent + pending < req.max_tokens:
            pending += await tokens.get()
            if sent == 0 and pending == 1 and req.api != "completions":  # the chat role chunk, response.created
                await write(framer.role())
            at_half = sent <= half < sent + pending
            if at_half and fault in MID_STREAM and await MID_STREAM[fault](request, write, stall_ms):
                return resp  # the fault ended the stream
            last = sent + pending == req.max_tokens
            if not last and merge_prob and rng.random() < merge_prob:
                # as vLLM does when a token decodes to no complete text yet: the token's chunk
                # goes out empty, and its text rides with the next one
                await write(framer.text("", last=False))
                continue
            if shape.reasoning or shape.tool_call:  # a reasoning model's or an agent's answer: its own chunks
                for chunk in shape.chunks(framer, sent, pending, last=last):
                    await write(chunk)
                sent, pending = sent + pending, 0
                continue
            text = output_text(sent, pending)
            if at_half and fault is Fault.OVERSIZED:
                text += "x" * OVERSIZED_BYTES
            await write(framer.text(text, last=last, so_far=sent + pending))
            sent, pending = sent + pending, 0
        await write(framer.closing(sent, min(shape.reasoning, sent)))
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client went away; the finally in _complete cancels the sequence
    return resp


@dataclass(frozen=True, slots=True)
class AnswerShape:
    """What an answer's tokens are: its first ``reasoning`` tokens reasoning, the rest text or a tool call's
    arguments. A group of tokens sent at once that crosses from reasoning to the answer is two chunks."""

    reasoning: int = 0
    tool_call: bool = False

    def chunks(self, framer: ChunkFramer | ResponsesFramer, start: int, n: int, *, last: bool) -> list[bytes]:
        """The chunks of tokens ``start .. start+n-1``."""
        out = []
        thought = max(0, min(n, self.reasoning - start))
        if thought:
            out.append(framer.reasoning(output_text(start, thought)))
        if n > thought:
            text = output_text(start + thought, n - thought)
            if self.tool_call:
                out.append(framer.tool_call(text, first=start + thought == self.reasoning, last=last))
            else:
                out.append(framer.text(text, last=last))
        return out


def _answer_shape(options: SimOptions, req: SimRequest, rng: np.random.Generator) -> AnswerShape:
    """A chat answer's shape under the options: reasoning first, a tool call at the configured share."""
    if req.api == "completions" or not (options.reasoning_tokens or options.tool_call_share):
        return AnswerShape()
    tool = options.tool_call_share > 0 and bool(rng.random() < options.tool_call_share)
    return AnswerShape(min(options.reasoning_tokens, req.max_tokens - 1), tool)


REJECTIONS: dict[Fault, tuple[str, int, dict[str, str] | None]] = {
    Fault.HTTP_429: ("simulated rate limit", 429, {"Retry-After": "1"}),
    Fault.HTTP_500: ("simulated internal error", 500, None),
    Fault.HTTP_503: ("simulated overload", 503, {"Retry-After": "1"}),
}
"""Faults answered instead of a stream: (message, status, headers)."""

Writer = Callable[[bytes], Awaitable[None]]


async def _drop(request: web.Request, write: Writer, stall_ms: float) -> bool:
    assert request.transport is not None
    request.transport.abort()  # no terminating chunk: the client sees a broken stream
    return True


async def _hang(request: web.Request, write: Writer, stall_ms: float) -> bool:
    while request.transport is not None and not request.transport.is_closing():
        await asyncio.sleep(0.05)  # silent until the client gives up
    return True


async def _stall(request: web.Request, write: Writer, stall_ms: float) -> bool:
    await asyncio.sleep(stall_ms / 1000.0)
    return False


async def _malformed(request: web.Request, write: Writer, stall_ms: float) -> bool:
    await write(ChunkFramer.MALFORMED)
    return False


MID_STREAM: dict[Fault, Callable[[web.Request, Writer, float], Awaitable[bool]]] = {
    Fault.DROP: _drop,
    Fault.HANG: _hang,
    Fault.STALL: _stall,
    Fault.MALFORMED: _malformed,
}
"""Faults that strike half-way through a stream; each says whether the stream ends there. (TRICKLE
changes every write and OVERSIZED the half-way chunk's text: they stay where they act.)"""

OVERSIZED_BYTES = 1 << 20
TRICKLE_PIECE = 7


def _trickle(resp: web.StreamResponse) -> Writer:
    """A writer that sends a few bytes at a time: every split the client's decoder must survive."""

    async def write(data: bytes) -> None:
        for i in range(0, len(data), TRICKLE_PIECE):
            await resp.write(data[i : i + TRICKLE_PIECE])
            await asyncio.sleep(0.001)

    return write
