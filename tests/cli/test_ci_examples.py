"""The CI recipes in ``examples/ci/`` are valid YAML, and every ``loadgen`` command in them names a real
subcommand with real options: a recipe that fails on its first run is worse than none."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.core import TyperGroup

from loadgen.cli import app

EXAMPLES = Path(__file__).parents[2] / "examples" / "ci"


def shell_lines(doc: Any) -> Iterator[str]:
    """Every shell script in a GitHub Actions workflow (``run``) or a GitLab job (``script``...)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "run" and isinstance(value, str):
                yield from value.replace("\\\n", " ").splitlines()
            elif key in ("script", "after_script", "before_script") and isinstance(value, list):
                yield from (str(line) for line in value)
            else:
                yield from shell_lines(value)
    elif isinstance(doc, list):
        for item in doc:
            yield from shell_lines(item)


def loadgen_commands(text: str) -> list[list[str]]:
    out = []
    for line in shell_lines(yaml.safe_load(text)):
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            words = words[1:] if words[:1] == ["nohup"] else words
            if words and words[0] == "loadgen":
                out.append(words[1:])
    return out


@pytest.mark.parametrize("recipe", sorted(EXAMPLES.glob("*.yml")), ids=lambda p: p.name)
def test_every_loadgen_command_in_a_recipe_exists(recipe: Path) -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    context = typer.Context(group)
    commands = loadgen_commands(recipe.read_text())
    assert {c[0] for c in commands} >= {"serve-sim", "sweep", "gate", "report"}
    for words in commands:
        command = group.get_command(context, words[0])  # the lazy group loads it
        assert command is not None, f"{recipe.name}: no command {words[0]!r}"
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        flags = [w.split("=")[0] for w in words[1:] if w.startswith("-")]
        assert set(flags) <= known, f"{recipe.name}: loadgen {words[0]} has no {set(flags) - known}"
