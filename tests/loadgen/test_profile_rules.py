"""Issue 69: a rule that ties one profile field to another is written once (``loadgen/inputs/profile_rules.py``)
and said in the words of whoever made the profile: a YAML file's paths, ``run``'s flags, or, for a profile made
in code, its fields when a session is assembled from it. Each fires on its cause and is silent without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ProfileError
from loadgen.inputs.profile import parse_profile
from loadgen.inputs.profile_rules import broken_rules

CASES = [  # (the profile's YAML, run's flags, what the file is told, what the flags are told)
    ({"api": "completions", "workload": {"turns": 2}}, ["--api", "completions", "--concurrency", "2", "--turns", "2"],
     "workload.turns: runs closed-loop chat conversations: load.mode closed, api chat or responses",
     "--turns runs closed-loop chat conversations: --concurrency, --api chat (or responses), no --dataset or --trace"),
    ({"api": "completions", "workload": {"images": {"count": 1}}}, ["--api", "completions", "--images", "1"],
     "workload.images: go in chat messages: api chat or responses",
     "--images go in chat messages: --api chat (or responses)"),
    ({"workload": {"output_from_dataset": True}}, ["--output-from-dataset"],
     "workload.output_from_dataset: reads answer lengths from workload.dataset; give one",
     "--output-from-dataset reads answer lengths from --dataset; give one"),
    ({"workload": {"batch_sizes": [2]}}, ["--batch", "2"],
     "workload.batch_sizes: batches the inputs of api embeddings or rerank",
     "--batch batches the inputs of --api embeddings or rerank"),
]  # fmt: skip


@pytest.mark.parametrize(("yaml", "flags", "to_file", "to_flags"), CASES)
def test_each_rule_is_said_to_a_file_and_to_flags_alike(
    tmp_path: Path, yaml: dict[str, Any], flags: list[str], to_file: str, to_flags: str
) -> None:
    with pytest.raises(ProfileError) as refused:
        parse_profile({"name": "p", **yaml}, "p.yaml")
    assert to_file in str(refused.value)
    args = ["run", "--url", "sim", "--virtual-time", "--requests", "2", *flags]
    args += ["--concurrency", "1"] if "--concurrency" not in flags else []
    result = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 2 and to_flags in result.stderr, result.stderr


def test_a_profile_that_keeps_every_rule_breaks_none() -> None:
    for yaml in (
        {"api": "chat", "workload": {"turns": 3}, "load": {"mode": "closed"}},
        {"api": "responses", "workload": {"images": {"count": 2}}},
        {"api": "embeddings", "workload": {"batch_sizes": [1, 4]}},
        {},
    ):
        assert list(broken_rules(parse_profile({"name": "ok", **yaml}, "ok.yaml"))) == [], yaml
