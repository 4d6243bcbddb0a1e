"""``loadgen import``: another tool's numbers (a per-level table, vLLM bench serve JSON) as a results file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from loadgen.cli.bounds import bounded
from loadgen.cli.common import check_writable, consoles, friendly_errors, write_output
from loadgen.errors import UsageError
from loadgen.limits import MAX_TOKENS

if TYPE_CHECKING:
    from loadgen.inputs.imports import ImportedLevel


@friendly_errors
def import_cmd(
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE...",
            help="A per-level table (CSV or JSON list; columns in docs/planning.md), vLLM bench serve result "
            "JSON files (one level each), GuideLLM benchmarks.json or AIPerf profile_export_aiperf.json.",
        ),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", metavar="FILE", help="Results file to write.")] = Path(
        "imported.json"
    ),
    model: Annotated[str, typer.Option(metavar="ID", help="Model name to record.")] = "unknown",
    output_tokens: Annotated[
        float | None,
        typer.Option(
            metavar="NUMBER",
            help="Output tokens per request, where the file has no such column (derives requests/s from tok/s).",
        ),
    ] = None,
    prompt_tokens: Annotated[
        float | None,
        typer.Option(metavar="NUMBER", help="Prompt tokens per request, where the file has no such column."),
    ] = None,
) -> None:
    """Turn numbers from another tool into a results file that plan, report and compare read.

    Histograms are synthesised to answer the given percentiles and means, and only those
    are read back; requests/s and tokens per request are read or derived by a named rule
    (usage counts, Little's law), never assumed. The plan marks its answers 'unknown'.
    """
    from loadgen.inputs.imports import PerRequest, read_levels, to_results

    bounded("--output-tokens", output_tokens, minimum=0, exclusive=True, maximum=MAX_TOKENS)
    bounded("--prompt-tokens", prompt_tokens, minimum=0, exclusive=True, maximum=MAX_TOKENS)
    check_writable(output)
    levels: list[ImportedLevel] = []
    where: list[str] = []  # each level's file and row (or entry), for a refusal that names them
    formats = set()
    for path in files:
        found, fmt = read_levels(path)
        levels += found
        where += [f"{path.name} {'row' if fmt == 'table' else 'level'} {i + (2 if fmt == 'table' else 1)}"
                  for i in range(len(found))]  # fmt: skip
        formats.add(fmt)
    if not levels:
        raise UsageError(f"{', '.join(map(str, files))}: no level found")
    kinds = {lv.load.kind for lv in levels}
    if len(kinds) > 1:
        raise UsageError("the levels mix concurrency and rate: import closed-loop and open-loop runs separately")
    seen: dict[float, int] = {}
    for i, lv in enumerate(levels):
        if (first := seen.setdefault(lv.load.value, i)) != i:
            raise UsageError(
                f"two levels have the same load {lv.load.label} ({where[first]} and {where[i]}): one row per load "
                "level (a level measured twice: keep one, or import each run to its own file)"
            )
    results = to_results(
        levels,
        source=", ".join(p.name for p in files),
        fmt="+".join(sorted(formats)),
        model=model,
        per_request=PerRequest(output_tokens, prompt_tokens),
    )
    write_output(output, results.to_json())
    out = consoles()
    for note in results.notes:
        out.err.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    out.err.print(f"{len(results.levels)} level(s) imported to {output}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("import")(import_cmd)
