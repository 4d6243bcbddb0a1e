"""A level's fields declared once: each says its JSON key, its value in files written before it existed,
and how the shares of several workers combine.

The level record's ``to_json``, ``from_json`` and the merge of worker shares are derived from these
declarations (``encode``, ``decode``, ``combine``), so a new counter is one line beside its siblings in
``LevelResult``: no writer, reader or merge list to keep in step (each once was, in four files).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from loadgen.histogram import HistogramConfig

META: Final = "loadgen.declared"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """What a reader may need beside its own value: the histogram range and the whole level's JSON."""

    config: HistogramConfig
    raw: Mapping[str, Any]


Reader = Callable[[Any, Context], Any]
Writer = Callable[[Any], Any]
Combiner = Callable[[Sequence[Any]], Any]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Declared:
    """How one field of the level record is stored and combined."""

    key: str  # its place in the level's JSON; a dot nests it ("tokens.events")
    read: Reader  # the JSON value (never None unless ``absent`` allows it) -> the field's value
    write: Writer  # the field's value -> the JSON value
    combine: Combiner  # the shares' values (in worker order) -> the level's
    absent: Callable[[Mapping[str, Any]], Any] | None  # the value in a file without the key (None: required)


def declare(
    key: str,
    *,
    default: Any = dataclasses.MISSING,
    read: Reader | None = None,
    write: Writer | None = None,
    combine: Combiner,
    absent: Callable[[Mapping[str, Any]], Any] | None = None,
) -> Any:
    """A dataclass field stored under ``key``. ``default`` is the field's default for a new level and, unless
    ``absent`` says otherwise, the value a file written before the field existed reads as."""
    if absent is None and default is not dataclasses.MISSING:
        absent = _constant(default)
    spec = Declared(key=key, read=read or _plain, write=write or _plain_out, combine=combine, absent=absent)
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata={META: spec})
    return dataclasses.field(default=default, metadata={META: spec})


def counter(
    key: str, *, default: Any = dataclasses.MISSING, absent: Callable[[Mapping[str, Any]], Any] | None = None
) -> Any:
    """A count that adds up over the shares (a file without it reads ``default``, or ``absent``'s value)."""
    return declare(key, default=default, read=count, combine=added, absent=absent)


def kept_counter(key: str) -> Any:
    """A count that some shares (or older files) may not have kept: None there, and then for the level."""
    return declare(
        key, default=None, read=lambda v, ctx: None if v is None else count(v, ctx), combine=added_where_kept
    )


def _constant(value: Any) -> Callable[[Mapping[str, Any]], Any]:
    return lambda _raw: value


def _plain(value: Any, _ctx: Context) -> Any:
    return value


def _plain_out(value: Any) -> Any:
    return value


def declarations(cls: type) -> Iterable[tuple[str, Declared]]:
    """(field name, declaration) for each declared field of a dataclass, in declaration order."""
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(META)
        if spec is not None:
            yield f.name, spec


def encode(record: Any) -> dict[str, Any]:
    """The declared fields of ``record`` as nested JSON, in declaration order."""
    out: dict[str, Any] = {}
    for name, spec in declarations(type(record)):
        *parents, leaf = spec.key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = spec.write(getattr(record, name))
    return out


_NOTHING: Final = object()


def decode(cls: type, raw: Mapping[str, Any], config: HistogramConfig) -> dict[str, Any]:
    """The declared fields' values read from ``raw``; a key a file does not have reads as its ``absent``
    value; a required one missing raises KeyError naming it."""
    ctx = Context(config=config, raw=raw)
    values: dict[str, Any] = {}
    for name, spec in declarations(cls):
        value = _lookup(raw, spec.key)
        if value is _NOTHING or (value is None and spec.absent is not None):
            if spec.absent is None:
                raise KeyError(spec.key)
            values[name] = spec.absent(raw)
        else:
            try:
                values[name] = spec.read(value, ctx)
            except ValueError as exc:
                text = str(exc)  # ".http_5xx must be ...": a part of the field, named after its key
                raise ValueError(f"{spec.key}{'' if text.startswith('.') else ' '}{text}") from None
    return values


def _lookup(raw: Mapping[str, Any], key: str) -> Any:
    node: Any = raw
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _NOTHING
        node = node[part]
    return node


def combine(parts: Sequence[Any]) -> dict[str, Any]:
    """Each declared field of several shares of one record, combined by its own rule."""
    return {name: spec.combine([getattr(p, name) for p in parts]) for name, spec in declarations(type(parts[0]))}


# --- readers: a value as a results file must hold it (ValueError names what it got) ---


def count(value: Any, _ctx: Context | None = None) -> int:
    """A count: a finite whole number >= 0 (a hand-edited "-30 failed requests" is refused)."""
    number = float(value)
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(f"must be a finite count >= 0, got {value!r}")
    return int(value)


def non_negative(value: Any, _ctx: Context | None = None) -> float:
    """A finite number >= 0 (a NaN window once left a level trusted)."""
    number = float(value)
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(f"must be a finite number >= 0, got {value!r}")
    return number


def number(value: Any, _ctx: Context | None = None) -> float:
    return float(value)


def flag(value: Any, _ctx: Context | None = None) -> bool:
    return bool(value)


# --- combiners: how the shares of one level (several workers over one window) add up ---


def first(values: Sequence[Any]) -> Any:
    """The first share's: a setting all shares ran with."""
    return values[0]


def added(values: Sequence[Any]) -> Any:
    """Counts and in-flight means add up."""
    return sum(values)


def added_where_kept(values: Sequence[Any]) -> Any:
    """The sum, or None where any share did not keep the count: never a partial sum shown as the total."""
    return None if any(v is None for v in values) else sum(values)


def largest_known(values: Sequence[Any]) -> Any:
    """The worst share's, over the shares that measured it (None: none did)."""
    return max((v for v in values if v is not None), default=None)


def any_share(values: Sequence[Any]) -> bool:
    return any(values)


def every_share(values: Sequence[Any]) -> bool:
    return all(values)


def first_known(values: Sequence[Any]) -> Any:
    """The first share that has one (one scraper per level: the first worker's)."""
    return next((v for v in values if v is not None), None)
