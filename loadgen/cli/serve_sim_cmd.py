"""``loadgen serve-sim``: the built-in simulated server in the foreground."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from loadgen.choices import Mode
from loadgen.cli.common import EXIT_USAGE, consoles, fail
from loadgen.cli.stop_signals import SIGNALS, StopRequested
from loadgen.sim.framing import Tokenizer

if TYPE_CHECKING:
    from loadgen.sim.openai_app import SimOptions


def serve_sim(
    host: Annotated[
        str, typer.Option(metavar="TEXT", help="Address to bind. Loopback unless --allow-remote.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="N", min=0, max=65535, help="Port (0 picks a free one).")] = 8000,
    model: Annotated[str, typer.Option(metavar="TEXT", help="Model id served on /v1/models.")] = "sim-model",
    base_ms: Annotated[
        float, typer.Option(metavar="NUMBER", min=0.0, help="Fixed cost of one decode step, ms.")
    ] = 25.0,
    per_seq_ms: Annotated[
        float, typer.Option(metavar="NUMBER", min=0.0, help="Added step cost per running sequence, ms.")
    ] = 0.4,
    prefill_ms_per_token: Annotated[
        float,
        typer.Option(metavar="NUMBER", min=0.0, help="Added step cost per prompt token admitted in the step, ms."),
    ] = 0.0,
    max_num_seqs: Annotated[int, typer.Option(metavar="N", min=1, help="Most sequences running at once.")] = 128,
    per_kv_ms: Annotated[
        float,
        typer.Option(metavar="NUMBER", min=0.0, help="Added step cost per thousand KV tokens the step reads, ms."),
    ] = 0.0,
    prefill_attention_ms: Annotated[
        float,
        typer.Option(
            metavar="NUMBER",
            min=0.0,
            help="Added step cost per million (token, earlier token) pairs a prefill attends, ms: attention's "
            "share of prefill, which grows with the square of the prompt.",
        ),
    ] = 0.0,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option(
            metavar="N", min=1, help="Tokens per step (one per decode, prompt chunks after): chunked prefill."
        ),
    ] = None,
    kv_capacity_tokens: Annotated[
        int | None,
        typer.Option(metavar="N", min=1, help="KV cache size: a request waits until its prompt + output fit."),
    ] = None,
    mode: Annotated[
        Mode, typer.Option(help="Batching: continuous (vLLM's) or static (wait for a batch).")
    ] = Mode.CONTINUOUS,
    static_batch: Annotated[int, typer.Option(metavar="N", min=1, help="Static mode: batch size to collect.")] = 8,
    static_wait_ms: Annotated[
        float, typer.Option(metavar="NUMBER", min=0.0, help="Static mode: longest wait to fill a batch, ms.")
    ] = 50.0,
    noise_cv: Annotated[
        float, typer.Option(metavar="NUMBER", min=0.0, help="Lognormal step noise, coefficient of variation.")
    ] = 0.0,
    spec_draft_tokens: Annotated[
        int,
        typer.Option(
            metavar="N", min=0, max=64, help="Speculative decoding: draft tokens each decode step verifies (0: off)."
        ),
    ] = 0,
    spec_acceptance: Annotated[
        float,
        typer.Option(
            metavar="NUMBER", min=0.0, max=1.0, help="Speculative decoding: chance each draft token is accepted."
        ),
    ] = 0.0,
    lora_modules: Annotated[
        str | None,
        typer.Option(
            metavar="NAMES",
            help="LoRA adapters served beside --model, comma-separated (as vLLM's --lora-modules names them).",
        ),
    ] = None,
    max_loras: Annotated[
        int, typer.Option(metavar="N", min=1, help="Adapters resident, and mixed in one batch, at once.")
    ] = 4,
    lora_load_ms: Annotated[
        float, typer.Option(metavar="NUMBER", min=0.0, help="Added to a step for each adapter it loads, ms.")
    ] = 0.0,
    per_lora_ms: Annotated[
        float,
        typer.Option(metavar="NUMBER", min=0.0, help="Added to a step for each distinct adapter in its batch, ms."),
    ] = 0.0,
    merge_prob: Annotated[
        float,
        typer.Option(metavar="NUMBER", min=0.0, max=0.99, help="Chance a token is held and sent with the next one."),
    ] = 0.0,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            metavar="TEXT",
            help="Inject a fault per request with probability P: KIND=P, KIND one of "
            "http_429, http_500, http_503, drop, malformed, reset, hang, stall, trickle, oversized. "
            "Repeatable.",
        ),
    ] = None,
    stall_ms: Annotated[
        float, typer.Option(metavar="NUMBER", min=0.0, help="How long the 'stall' fault pauses a stream, ms.")
    ] = 1000.0,
    seed: Annotated[int, typer.Option(metavar="N", help="Seed for noise, faults and chunk merging.")] = 0,
    require_api_key: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Answer 401 unless requests carry 'Authorization: Bearer KEY'.")
    ] = None,
    max_model_len: Annotated[
        int,
        typer.Option(
            metavar="N", min=1, help="Context limit: prompt + max_tokens beyond it answer 400, as engines do."
        ),
    ] = 131_072,
    tokens_per_word: Annotated[
        float,
        typer.Option(metavar="NUMBER", min=0.1, help="Prompt tokens per word in usage, as a real tokenizer's ratio."),
    ] = 1.0,
    template_tokens: Annotated[
        int, typer.Option(metavar="N", min=0, help="Chat: tokens the template adds to a prompt.")
    ] = 0,
    image_tokens: Annotated[
        int,
        typer.Option(metavar="N", min=0, help="Chat: prompt tokens each image costs (a vision model's patches)."),
    ] = 0,
    no_prefix_cache: Annotated[
        bool,
        typer.Option(
            "--no-prefix-cache",
            metavar="",
            help="Prefill every prompt in full (by default prompt blocks seen before cost no prefill).",
        ),
    ] = False,
    reasoning_tokens: Annotated[
        int,
        typer.Option(metavar="N", min=0, help="Chat, responses: each answer's first N tokens stream as reasoning."),
    ] = 0,
    tool_call_share: Annotated[
        float,
        typer.Option(
            metavar="NUMBER", min=0.0, max=1.0, help="Chat, responses: the share of turns answered with a tool call."
        ),
    ] = 0.0,
    allow_remote: Annotated[
        bool, typer.Option("--allow-remote", metavar="", help="Allow binding a non-loopback address.")
    ] = False,
) -> None:
    """Serve the simulated continuous-batching engine as an OpenAI-compatible endpoint."""
    from loadgen.engine import EngineConfig
    from loadgen.sim.faults import FaultConfig
    from loadgen.sim.openai_app import SimOptions
    from loadgen.sim.server import is_loopback

    if not is_loopback(host) and not allow_remote:
        raise fail(f"--host {host}: not a loopback address; pass --allow-remote to bind it", EXIT_USAGE)
    try:
        options = SimOptions(
            engine=EngineConfig(
                base_ms=base_ms,
                per_seq_ms=per_seq_ms,
                prefill_ms_per_token=prefill_ms_per_token,
                max_num_seqs=max_num_seqs,
                mode=mode,
                static_batch=static_batch,
                static_wait_ms=static_wait_ms,
                noise_cv=noise_cv,
                spec_draft_tokens=spec_draft_tokens,
                spec_acceptance=spec_acceptance,
                seed=seed,
                per_kv_ms=per_kv_ms,
                max_num_batched_tokens=max_num_batched_tokens,
                kv_capacity_tokens=kv_capacity_tokens,
                prefill_attention_ms=prefill_attention_ms,
                adapter_slots=max_loras,
                adapter_load_ms=lora_load_ms,
                per_adapter_ms=per_lora_ms,
            ),
            faults=FaultConfig.parse(fault or []),
            model=model,
            merge_prob=merge_prob,
            api_key=require_api_key,
            stall_ms=stall_ms,
            max_model_len=max_model_len,
            tokenizer=Tokenizer(tokens_per_word, template_tokens, image_tokens),
            prefix_cache=not no_prefix_cache,
            reasoning_tokens=reasoning_tokens,
            tool_call_share=tool_call_share,
            lora_modules=tuple(name.strip() for name in (lora_modules or "").split(",") if name.strip()),
        )
    except ValueError as exc:
        raise fail(str(exc), EXIT_USAGE) from None
    err = consoles().err

    def ready(bound: int) -> None:
        err.print(f"simulator ({options.engine.law_text}) on http://{host}:{bound}/v1", highlight=False)
        # stdout gets the bare URL so scripts can read it
        typer.echo(f"http://{host}:{bound}/v1")

    try:
        asyncio.run(_serve(options, host, port, ready))
    except (KeyboardInterrupt, StopRequested):
        err.print("simulator stopped")
    except OSError as exc:
        raise fail(f"--host {host} --port {port}: cannot bind ({exc.strerror})", EXIT_USAGE) from None


async def _serve(options: SimOptions, host: str, port: int, ready: Callable[[int], None]) -> None:
    """Serve until a stop signal (Ctrl-C, TERM, HUP: the server closes cleanly)."""
    from loadgen.sim.server import serve_forever

    stop = asyncio.Event()
    with SIGNALS.steering(asyncio.get_running_loop(), stop):
        await serve_forever(options, host, port, ready, done=stop)
    consoles().err.print("simulator stopped")


def register(app: typer.Typer) -> None:
    app.command("serve-sim")(serve_sim)
