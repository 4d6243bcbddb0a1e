"""The level record is declared once: saving, loading and merging derive from the field declarations.

The golden files were written by the record before it was declared (a writer, a reader and a merge list,
each naming every counter): the declared record must write the same JSON, read the same files and merge
the same way, byte for byte. A counter added the declared way then needs no other line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest

from loadgen.histogram import DEFAULT_CONFIG
from loadgen.level.declared import counter, declarations
from loadgen.level.result import LevelResult
from loadgen.results import load
from loadgen.run.merge import merge_levels

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "level_golden"
CASES = {
    "turns": GOLDEN / "turns.json",
    "lora_sweep": GOLDEN / "lora_sweep.json",
    "chat_sweep": GOLDEN / "chat_sweep.json",
    "results_v1": DATA / "results_v1.json",
    "results_v1_sweep": DATA / "results_v1_sweep.json",
}


#: keys declared after the golden files were written (their old files read them as absent)
ADDED_SINCE = ("output_asked",)


def canonical(value: dict[str, Any]) -> str:
    tokens = {k: v for k, v in value.get("tokens", {}).items() if k not in ADDED_SINCE}
    return json.dumps({**value, "tokens": tokens}, sort_keys=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_declared_record_writes_and_merges_as_the_hand_written_one_did(name: str) -> None:
    expected = json.loads((GOLDEN / f"{name}.expected.json").read_text())
    levels = load(CASES[name]).levels
    assert [canonical(lv.to_json()) for lv in levels] == [canonical(x) for x in expected["levels"]]
    assert [canonical(merge_levels([lv, lv]).to_json()) for lv in levels] == [
        canonical(x) for x in expected["merged_with_itself"]
    ]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_level_read_back_from_its_own_json_is_the_same_level(name: str) -> None:
    for level in load(CASES[name]).levels:
        again = LevelResult.from_json(json.loads(json.dumps(level.to_json())), DEFAULT_CONFIG)
        assert canonical(again.to_json()) == canonical(level.to_json())


def test_every_stored_field_of_the_level_is_declared() -> None:
    """A field without a declaration would be silently dropped by save, load and merge alike."""
    declared = {name for name, _ in declarations(LevelResult)}
    assert {f.name for f in fields(LevelResult)} == declared
    keys = [spec.key for _, spec in declarations(LevelResult)]
    assert len(keys) == len(set(keys)), "two fields share a JSON key"


@dataclass(frozen=True, slots=True, kw_only=True)
class WidgetLevel(LevelResult):
    """A level with one more counter, declared the one way: nothing else names it."""

    widgets: int = counter("tokens.widgets", default=0)


def test_a_new_counter_is_one_declaration_saved_loaded_defaulted_and_merged() -> None:
    base = load(CASES["chat_sweep"]).levels[0]
    level = WidgetLevel(**{name: getattr(base, name) for name, _ in declarations(LevelResult)}, widgets=7)
    raw = json.loads(json.dumps(level.to_json()))
    assert raw["tokens"]["widgets"] == 7
    assert WidgetLevel.from_json(raw, DEFAULT_CONFIG).widgets == 7
    assert WidgetLevel.from_json(base.to_json(), DEFAULT_CONFIG).widgets == 0  # a file written before it
    merged = merge_levels([level, level])
    assert isinstance(merged, WidgetLevel)
    assert merged.widgets == 14 and merged.completed == 2 * base.completed


def test_a_bad_value_is_refused_naming_its_key() -> None:
    raw = load(CASES["chat_sweep"]).levels[0].to_json()
    raw["tokens"]["events"] = -3
    with pytest.raises(ValueError, match=r"^tokens\.events must be a finite count >= 0, got -3"):
        LevelResult.from_json(raw, DEFAULT_CONFIG)
    raw = load(CASES["chat_sweep"]).levels[0].to_json()
    raw["errors"] = {"http_5xx": "lots"}
    with pytest.raises(ValueError, match=r"^errors\.http_5xx "):
        LevelResult.from_json(raw, DEFAULT_CONFIG)
    raw = load(CASES["chat_sweep"]).levels[0].to_json()
    del raw["completed"]
    with pytest.raises(KeyError, match="completed"):
        LevelResult.from_json(raw, DEFAULT_CONFIG)
