"""Datasets read for a workload (ShareGPT, JSONL), their entries in words, and the request-body keys
the generator owns. The bodies themselves are built per request in ``loadgen.run.requests``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO

from loadgen.errors import UsageError, parse_json
from loadgen.limits import MAX_TOKENS


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetEntry:
    prompt: str | None
    messages: tuple[Mapping[str, Any], ...] | None
    max_tokens: int | None
    answer_words: int | None = None  # the recorded answer's length, for --output-from-dataset


class DatasetFormat(StrEnum):
    AUTO = "auto"
    SHAREGPT = "sharegpt"
    JSONL = "jsonl"


_HUMAN = frozenset({"human", "user"})
_MODEL = frozenset({"gpt", "assistant", "chatgpt", "bard", "model"})


def load_dataset(
    path: Path, fmt: DatasetFormat = DatasetFormat.AUTO, max_words: int | None = None
) -> tuple[DatasetEntry, ...]:
    """Read a prompt dataset: ShareGPT-style JSON, or JSON lines (OpenAI chat, or ``{"prompt": ...}``).

    ``auto`` tells them apart by the first character (``[``: a ShareGPT array).
    A ShareGPT conversation contributes its first human turn as the prompt and
    the answer that follows as the recorded answer length (as vLLM's benchmark
    reads it); conversations without both are skipped. A chat line whose last
    message is the assistant's sends the messages before it and records that
    answer's length. ``max_words`` drops entries whose prompt and recorded
    answer together are longer (words, not tokens: no tokenizer is needed),
    as benchmarks drop conversations too long for the model's context.
    """
    try:
        with path.open(encoding="utf-8-sig") as lines:  # a BOM is no part of the data
            if fmt == "auto":
                fmt = DatasetFormat.SHAREGPT if _first_character(lines) == "[" else DatasetFormat.JSONL
            # JSON lines are read a line at a time (the file's text is never held whole: a 1 GB dataset
            # once peaked at 3.4 GB as text, lines and entries); ShareGPT is one JSON document
            entries = _sharegpt(path, lines.read()) if fmt == "sharegpt" else _jsonl(path, lines, max_words)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read dataset ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a text dataset (expected UTF-8 JSON or JSON lines)") from None
    if max_words is not None:
        entries = tuple(e for e in entries if _entry_words(e) <= max_words)
    if not entries and max_words is not None:
        raise UsageError(f"{path}: no entry is {max_words} words or shorter (prompt + answer), or none at all")
    if not entries:
        raise UsageError(f"{path}: dataset has no prompts (read as {fmt})")
    return entries


def entry_words(entry: DatasetEntry) -> tuple[int, int | None]:
    """An entry's prompt (every message) and its recorded answer, in words (None: no answer recorded)."""
    prompt = entry.prompt if entry.prompt is not None else flatten_messages(entry.messages or ())
    return _words(prompt), entry.answer_words


def _first_character(lines: TextIO) -> str:
    """The first character that is not white space (the file is rewound after)."""
    while chunk := lines.read(4096):
        stripped = chunk.lstrip()
        if stripped:
            lines.seek(0)
            return stripped[0]
    lines.seek(0)
    return ""


def _entry_words(entry: DatasetEntry) -> int:
    """An entry's prompt (every message) and recorded answer, in words."""
    prompt, answer = entry_words(entry)
    return prompt + (answer or 0)


def _words(text: Any) -> int:
    return len(str(text).split())


def _sharegpt(path: Path, text: str) -> tuple[DatasetEntry, ...]:
    doc = parse_json(text, str(path), "ShareGPT JSON")
    if not isinstance(doc, list):
        raise UsageError(f'{path}: expected a JSON array of {{"conversations": [...]}} objects (ShareGPT)')
    entries = []
    for item in doc:
        turns = item.get("conversations", item.get("conversation")) if isinstance(item, dict) else None
        if not isinstance(turns, list):
            continue
        prompt = answer = None
        for turn in turns:
            if not isinstance(turn, dict):
                break
            who, value = turn.get("from", turn.get("role")), turn.get("value", turn.get("content"))
            if not isinstance(value, str) or not value.strip():
                break
            if prompt is None and who in _HUMAN:
                prompt = value
            elif prompt is not None and who in _MODEL:
                answer = value
                break
        if prompt is not None and answer is not None:
            entries.append(DatasetEntry(prompt=prompt, messages=None, max_tokens=None, answer_words=_words(answer)))
    return tuple(entries)


def _jsonl(path: Path, lines: Iterable[str], max_words: int | None = None) -> tuple[DatasetEntry, ...]:
    entries = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        obj = parse_json(line, f"{path}:{no}")
        if not isinstance(obj, dict) or not (
            isinstance(obj.get("prompt"), str) or isinstance(obj.get("messages"), list)
        ):
            raise UsageError(f'{path}:{no}: expected {{"prompt": "..."}} or {{"messages": [...]}}')
        max_tokens = obj.get("max_tokens")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS
        ):
            shown = max_tokens if not isinstance(max_tokens, int) or max_tokens < 10**9 else "a larger number"
            raise UsageError(f"{path}:{no}: max_tokens must be an integer from 1 to {MAX_TOKENS:,}, got {shown!r}")
        messages = obj.get("messages")
        answer = obj.get("completion", obj.get("response"))
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
            answer, messages = messages[-1].get("content"), messages[:-1]
            if not messages:
                raise UsageError(f"{path}:{no}: only an assistant message: nothing to send")
        entry = DatasetEntry(
            prompt=obj.get("prompt"),
            messages=tuple(messages) if messages else None,
            max_tokens=max_tokens,
            answer_words=_words(answer) if isinstance(answer, str) and answer.strip() else None,
        )
        if max_words is None or _entry_words(entry) <= max_words:  # dropped entries are not held
            entries.append(entry)
    return tuple(entries)


OWNED_KEYS = {  # request fields the tool sets itself, and how to set each
    "model": "use --model",
    "messages": "use --prompt-tokens or --dataset",
    "prompt": "use --prompt-tokens or --dataset",
    "max_tokens": "use --max-tokens (or the profile's output_tokens)",
    "input": "use --prompt-tokens or --dataset",
    "max_output_tokens": "use --max-tokens (or the profile's output_tokens)",
    "stream": "streaming is always on: the tool measures streams",
}


def owned_key_problem(extra_body: Mapping[str, Any]) -> str | None:
    """Why ``extra_body`` may not be merged into requests (it would silently override the tool), or None.

    ``stream_options`` is merged (vLLM's ``continuous_usage_stats`` lives there), but usage must stay on.
    """
    for key, flag in OWNED_KEYS.items():
        if key in extra_body:
            return f"sets {key!r}, which the tool owns: {flag}"
    options = extra_body.get("stream_options", {})
    if not isinstance(options, dict):
        return "stream_options must be an object"
    if options.get("include_usage") is False:
        return "stream_options.include_usage must stay true: token counts come from the server's usage"
    return None


def flatten_messages(messages: tuple[Mapping[str, Any], ...]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)
