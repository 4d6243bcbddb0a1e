"""Caveats said once: the same sentence of several levels, or of them with other numbers, is one line.

``c=32: client-bound (generator CPU 86% busy) ...`` and the same at c=48 with 91% become
``c=32, c=48: client-bound (generator CPU 86..91% busy) ...``: a reader sees the cause once, with the
levels it holds at and the range its numbers took. Numbers that name something rather than measure it
(``p95``, ``c=32``, ``x2``) are part of the sentence, so a p95's caveat never merges with a p99's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

#: a level's label at the head of a caveat: ``c=8``, ``r=2.5/s``, ``c=1 b=16``
LEVEL_PREFIX: Final = re.compile(r"^((?:c|r)=[0-9.]+(?:/s)?(?: b=\d+)?): (.+)$", re.DOTALL)
#: a measured number: not glued to a word or a sign before it (``p95``, ``c=8``, ``1e3`` stay words)
_NUMBER: Final = re.compile(r"(?<![\w=.])\d+(?:,\d{3})*(?:\.\d+)?(?![\w.]\d)")


def said_once(caveats: Iterable[str]) -> list[str]:
    """Each caveat once, in the order first said; those differing only in their level and their numbers
    are one line naming the levels, each number shown as the range it took (``86..91%``)."""
    groups: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    for text in caveats:
        match = LEVEL_PREFIX.match(text)
        label, body = (match.group(1), match.group(2)) if match else ("", text)
        members = groups.setdefault(tuple(_NUMBER.split(body)), [])
        if (label, body) not in members:
            members.append((label, body))
    return [_merged(shape, members) for shape, members in groups.items()]


def said_once_across(named: Iterable[tuple[str, str]]) -> list[str]:
    """Each source's caveat once across sources (``(source, caveat)``, e.g. a calibration file and its note):
    those differing only in their numbers are one line naming every source they hold for, each number as
    its range. Four imported tables of one vendor otherwise said the same three notes four times each."""
    groups: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    for source, text in named:
        members = groups.setdefault(tuple(_NUMBER.split(text)), [])
        if (source, text) not in members:
            members.append((source, text))
    return [_merged(shape, members) for shape, members in groups.items()]


def _merged(shape: tuple[str, ...], members: list[tuple[str, str]]) -> str:
    """One line for a group: the levels named (where every member had one), the numbers as ranges."""
    numbers = [_NUMBER.findall(body) for _, body in members]
    body = shape[0] + "".join(_span([row[i] for row in numbers]) + literal for i, literal in enumerate(shape[1:]))
    labels = list(dict.fromkeys(label for label, _ in members))
    return f"{', '.join(labels)}: {body}" if all(labels) else body


def _span(column: list[str]) -> str:
    """The numbers one place of a sentence took: the one, or the lowest..highest."""
    if len(set(column)) == 1:
        return column[0]
    values = sorted(column, key=lambda text: float(text.replace(",", "")))
    return f"{values[0]}..{values[-1]}"
