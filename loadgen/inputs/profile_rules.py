"""The rules that tie one profile field to another, in one place for every way a profile is made.

A profile comes from YAML (``inputs/profile.py``), from ``run``'s flags (``cli/run_cmd.py``), or from code
(a test, a notebook); the same combination is wrong in each (``turns`` with a dataset, images on the
completions API). Each rule is written here once, naming what it ties by a key of ``NAMES``, and said in
the words of whoever made the profile: its YAML paths, or its flags.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from loadgen.inputs.profile import Profile

Speaker = Literal["profile", "flags"]

#: each thing a rule names: as a profile's YAML says it, and as ``run``'s flags do
NAMES: dict[str, tuple[str, str]] = {
    "turns": ("workload.turns", "--turns"),
    "closed": ("load.mode closed", "--concurrency"),
    "chat": ("api chat or responses", "--api chat (or responses)"),
    "pooling": ("api embeddings or rerank", "--api embeddings or rerank"),
    "dataset": ("workload.dataset", "--dataset"),
    "trace": ("load.trace", "--trace"),
    "images": ("workload.images", "--images"),
    "output_from_dataset": ("workload.output_from_dataset", "--output-from-dataset"),
    "batch": ("workload.batch_sizes", "--batch"),
}


@dataclass(frozen=True, slots=True)
class Broken:
    """One rule a profile breaks: the field it is about (a key of ``NAMES``) and what is wrong, with each
    name it uses as ``{key}``."""

    field: str
    text: str

    def words(self, speaker: Speaker) -> str:
        """What is wrong in ``speaker``'s words: YAML paths, or flags."""
        k = 0 if speaker == "profile" else 1
        return self.text.format(**{key: names[k] for key, names in NAMES.items()})

    def said(self, speaker: Speaker) -> str:
        """The rule in ``speaker``'s words, the field it is about first."""
        return f"{NAMES[self.field][0 if speaker == 'profile' else 1]} {self.words(speaker)}"


def broken_rules(profile: Profile) -> Iterator[Broken]:
    """Every cross-field rule ``profile`` breaks, the first one first."""
    w, api = profile.workload, profile.api
    if w.turns > 1 and (profile.load.mode != "closed" or not api.messages or w.dataset or profile.load.trace):
        yield Broken("turns", "runs closed-loop chat conversations: {closed}, {chat}, no {dataset} or {trace}")
    if w.images is not None and not api.messages:
        yield Broken("images", "go in chat messages: {chat}")
    if w.images is not None and w.dataset is not None:
        yield Broken("images", "go with synthetic prompts: no {dataset}")
    if w.output_from_dataset and w.dataset is None:
        yield Broken("output_from_dataset", "reads answer lengths from {dataset}; give one")
    if w.batch_sizes != (1,) and not api.pooling:
        yield Broken("batch", "batches the inputs of {pooling}")
    if api.pooling and w.dataset is not None:
        yield Broken("dataset", "{pooling} sends synthetic inputs: no {dataset}")
