"""``loadgen profile list|show|validate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from loadgen.cli.common import consoles, friendly_errors

app = typer.Typer(no_args_is_help=True, help="List, show and validate workload profiles.")


@app.command("list")
@friendly_errors
def list_cmd(
    json_out: Annotated[bool, typer.Option("--json", metavar="", help="Print the list as JSON.")] = False,
) -> None:
    """The shipped profiles (and ./profiles/*.yaml) and what each is for."""
    from loadgen.inputs.profile import list_profiles, load_profile

    rows: list[dict[str, Any]] = []
    for path in list_profiles():
        p = load_profile(path)
        target = "simulator" if p.url is None else p.url
        rows.append({"name": p.name, "target": target, "levels": list(p.load.levels), "description": p.description,
                     "path": str(path)})  # fmt: skip
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table("name", "target", "levels", "description")
    for row in rows:
        table.add_row(row["name"], row["target"], ", ".join(f"{v:g}" for v in row["levels"]), row["description"])
    consoles().out.print(table)


@app.command("show")
@friendly_errors
def show(name: Annotated[str, typer.Argument(help="Profile name or path.")]) -> None:
    """The profile as resolved (defaults filled in), as JSON."""
    from loadgen.inputs.profile import find_profile, load_profile

    typer.echo(json.dumps(load_profile(find_profile(name)).to_json(), indent=2))


@app.command("validate")
@friendly_errors
def validate(paths: Annotated[list[Path], typer.Argument(help="Profile files to check.")]) -> None:
    """Check profiles; the first error is printed with its file and field (exit 2)."""
    from loadgen.inputs.profile import load_profile

    for path in paths:
        load_profile(path)
        consoles().out.print(f"{path}: ok", highlight=False)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="profile")
