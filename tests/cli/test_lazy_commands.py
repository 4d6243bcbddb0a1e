"""``loadgen --help`` lists every command without importing any of them, and says what each says."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from loadgen.cli.commands import COMMANDS, load_command


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listed_summary_is_the_commands_own_first_paragraph(name: str) -> None:
    command = load_command(name)
    assert command.name == name and command.help
    first = " ".join(command.help.split("\n\n")[0].split())
    assert COMMANDS[name].summary == first


HEAVY = ("numpy", "matplotlib", "aiohttp", "httpx", "planner", "yaml")


def imported_by_help(*args: str) -> tuple[list[str], str]:
    """The heavy packages ``loadgen ARGS --help`` imported, and what it printed."""
    code = (
        f"import sys\nfrom loadgen.cli import main\nsys.argv = ['loadgen', *{list(args)!r}, '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    heavy = out[out.rindex("HEAVY") :].strip()
    return ast.literal_eval(heavy.removeprefix("HEAVY ")), out


def test_the_top_level_help_imports_no_command() -> None:
    heavy, out = imported_by_help()
    assert heavy == []
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_commands_help_imports_nothing_it_would_only_run(name: str) -> None:
    """Issue 73: ``loadgen run --help`` took 0.7-1.3 s importing the HTTP clients, numpy and the planner to
    print its options; a command imports what it runs when it runs (benchmarks/startup.py times it)."""
    heavy, out = imported_by_help(name)
    assert heavy == [] and "Usage: loadgen " + name in " ".join(out.split()), out
