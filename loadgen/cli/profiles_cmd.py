"""``loadgen profile list|show|validate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from loadgen.cli.common import consoles, friendly_errors
from loadgen.profile import find_profile, list_profiles, load_profile

app = typer.Typer(no_args_is_help=True, help="List, show and validate workload profiles.")


@app.command("list")
@friendly_errors
def list_cmd() -> None:
    """The shipped profiles (profiles/*.yaml) and what each is for."""
    table = Table("name", "target", "levels", "description")
    for path in list_profiles():
        p = load_profile(path)
        table.add_row(
            p.name, "simulator" if p.url is None else p.url, ", ".join(f"{v:g}" for v in p.load.levels), p.description
        )
    consoles().out.print(table)


@app.command("show")
@friendly_errors
def show(name: Annotated[str, typer.Argument(help="Profile name or path.")]) -> None:
    """The profile as resolved (defaults filled in), as JSON."""
    typer.echo(json.dumps(load_profile(find_profile(name)).to_json(), indent=2))


@app.command("validate")
@friendly_errors
def validate(paths: Annotated[list[Path], typer.Argument(help="Profile files to check.")]) -> None:
    """Check profiles; the first error is printed with its file and field (exit 2)."""
    for path in paths:
        load_profile(path)
        consoles().out.print(f"{path}: ok", highlight=False)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="profile")
