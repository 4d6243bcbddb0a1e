"""``loadgen --help`` lists every command without importing any of them, and says what each says."""

from __future__ import annotations

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


def test_the_top_level_help_imports_no_command() -> None:
    code = (
        "import sys\nfrom loadgen.cli import main\nsys.argv = ['loadgen', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('numpy', 'matplotlib', 'aiohttp', 'httpx', 'planner') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "HEAVY []" in out
    for name in COMMANDS:
        assert name in out
