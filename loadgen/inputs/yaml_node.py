"""A typed reader of one YAML document that names the file and field path on every error.

``Node`` wraps a value with where it came from, so a bad value reads
``profiles/chat.yaml: load.levels[3]: must be a positive integer, got -4``
and an unknown key suggests the nearest known one. Keys named in
``sections`` read as an empty mapping when absent. Used by the profile
loader; it knows nothing about profiles.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Final, NoReturn, TypeVar

from loadgen.errors import ProfileError

C = TypeVar("C", bound=str)

_MISSING: Final = object()


class Node:
    """One value in the YAML tree, with its path for error messages."""

    def __init__(self, source: str, path: str, value: Any, *, sections: frozenset[str] = frozenset()) -> None:
        self.source, self.path, self.value, self.sections = source, path, value, sections

    def fail(self, message: str) -> NoReturn:
        raise ProfileError(f"{self.source}: {self.path or '(top level)'}: {message}")

    def child(self, key: str) -> Node:
        value = self.value.get(key) if isinstance(self.value, dict) else None
        if value is None and key in self.sections:
            value = {}
        return Node(self.source, f"{self.path}.{key}" if self.path else key, value, sections=self.sections)

    def item(self, index: int) -> Node:
        return Node(self.source, f"{self.path}[{index}]", self.value[index], sections=self.sections)

    def require_mapping(self) -> None:
        if not isinstance(self.value, dict):
            self.fail(f"expected a mapping, got {_show(self.value)}")

    def known(self, *keys: str) -> None:
        for key in self.value:
            if key not in keys:
                hint = difflib.get_close_matches(str(key), keys, n=1)
                where = f"{self.path}.{key}" if self.path else str(key)
                raise ProfileError(
                    f"{self.source}: {where}: unknown key"
                    + (f"; did you mean {hint[0]!r}?" if hint else f" (known: {', '.join(keys)})")
                )

    def _get(self, key: str) -> tuple[Node, Any]:
        node = self.child(key)
        return node, self.value.get(key, _MISSING) if isinstance(self.value, dict) else _MISSING

    def mapping(self, key: str) -> dict[str, Any]:
        node = self.child(key)
        node.require_mapping()
        return dict(node.value)

    def string(self, key: str, default: str) -> str:
        node, raw = self._get(key)
        if raw is _MISSING or raw is None:
            return default
        if not isinstance(raw, str):
            node.fail(f"must be a string, got {_show(raw)}")
        return str(raw)

    def optional_string(self, key: str) -> str | None:
        value = self.string(key, "")
        return value or None

    def choice(self, key: str, default: C, allowed: tuple[C, ...]) -> C:
        """A member of a closed set (its owner's ``get_args`` tuple)."""
        value = self.string(key, default)
        for member in allowed:
            if member == value:
                return member
        self.child(key).fail(f"must be one of {', '.join(allowed)}, got {value!r}")

    def boolean(self, key: str, default: bool) -> bool:
        node, raw = self._get(key)
        if raw is _MISSING or raw is None:
            return default
        if not isinstance(raw, bool):
            node.fail(f"must be true or false, got {_show(raw)}")
        return bool(raw)

    def number(
        self,
        key: str,
        default: float,
        *,
        minimum: float | None = None,
        exclusive: bool = False,
        maximum: float | None = None,
    ) -> float:
        value = self.optional_number(key, minimum=minimum, exclusive=exclusive, maximum=maximum)
        return default if value is None else value

    def optional_number(
        self,
        key: str,
        *,
        minimum: float | None = None,
        exclusive: bool = False,
        maximum: float | None = None,
        default: float | None = None,
    ) -> float | None:
        node, raw = self._get(key)
        if raw is _MISSING:
            return default
        if raw is None:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not _finite(raw):
            node.fail(f"must be a finite number, got {_show(raw)}")
        value = float(raw)
        if minimum is not None and (value < minimum or (exclusive and value == minimum)):
            node.fail(f"must be {'>' if exclusive else '>='} {minimum:,g}, got {_show(raw)}")
        if maximum is not None and value > maximum:
            node.fail(f"must be <= {maximum:,g}, got {_show(raw)}")
        return value

    def integer(self, key: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self.optional_integer(key, minimum=minimum, maximum=maximum)
        return default if value is None else value

    def optional_integer(self, key: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
        node, raw = self._get(key)
        if raw is _MISSING or raw is None:
            return None
        return node.integer_value(minimum=minimum, maximum=maximum)

    def integer_value(self, *, minimum: int | None = None, maximum: int | None = None) -> int:
        raw = self.value
        if isinstance(raw, bool) or not isinstance(raw, int):
            self.fail(f"must be an integer, got {_show(raw)}")
        if minimum is not None and raw < minimum:
            self.fail(f"must be an integer >= {minimum}, got {_show(raw)}")
        if maximum is not None and raw > maximum:
            self.fail(f"must be an integer <= {maximum:,}, got {_show(raw)}")
        return int(raw)

    def positive_integer_value(self, maximum: int | None = None) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int) or self.value < 1:
            self.fail(f"must be a positive integer, got {_show(self.value)}")
        return self.integer_value(maximum=maximum)

    def positive_number_value(self, maximum: float | None = None) -> float:
        value = self.value
        if isinstance(value, bool) or not isinstance(value, int | float) or not (_finite(value) and value > 0):
            self.fail(f"must be a positive finite number, got {_show(value)}")
        if maximum is not None and value > maximum:
            self.fail(f"must be <= {maximum:,g}, got {_show(value)}")
        return float(value)


def _finite(value: float) -> bool:
    """Finite and representable as a float (a 400-digit integer is neither, and float() would raise)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


_SHOWN_DIGITS = 30


def _show(value: Any) -> str:
    """A value as a one-line message shows it: a huge integer by its size (str() refuses past 4,300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _SHOWN_DIGITS * 3.33:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    if isinstance(value, str):
        shown = repr(value)
        return shown if len(shown) <= 80 else shown[:77] + "..."
    return str(value).lower() if isinstance(value, bool) else str(value)
