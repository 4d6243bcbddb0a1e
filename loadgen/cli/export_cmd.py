"""``loadgen export``: a results file's levels, or a ``--records`` file's requests, for other tools to read."""

from __future__ import annotations

import csv
import io
import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from loadgen.cli.common import check_writable, consoles, friendly_errors, write_output
from loadgen.errors import LoadgenError, UsageError

PARQUET_MISSING = "--format parquet writes with pyarrow, which is not installed: pip install 'loadgen[export]'"


class ExportFormat(StrEnum):
    CSV = "csv"
    PARQUET = "parquet"
    LLMD = "llm-d"


@friendly_errors
def export(
    source: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="A results file (its levels, a row per model where requests were split) or a --records JSONL "
            "file (its requests).",
        ),
    ],
    fmt: Annotated[
        ExportFormat,
        typer.Option("--format", help="csv, parquet (pyarrow), or llm-d (llm-d-benchmark's report v0.1, YAML)."),
    ] = ExportFormat.CSV,
    output: Annotated[Path, typer.Option("--output", "-o", metavar="FILE", help="File to write.")] = Path("export.csv"),
) -> None:
    """Export levels or per-request records as CSV, Parquet or llm-d benchmark reports (docs/export.md)."""
    from loadgen.results import load
    from loadgen.run.records_table import COLUMNS as RECORD_COLUMNS
    from loadgen.run.records_table import read_records, record_row
    from planner.reports.llmd import llmd_reports
    from planner.reports.render_csv import CSV_COLUMNS, LATENCY_COLUMNS, level_table

    check_writable(output)
    records = _is_records(source)
    columns: tuple[str, ...]
    if records and fmt is ExportFormat.LLMD:
        raise UsageError("--format llm-d reports a results file's levels: give a results file, not --records")
    if records:
        columns, rows = RECORD_COLUMNS, [record_row(label, r) for label, r in read_records(source, "FILE")]
    else:
        results = load(source)
        if fmt is ExportFormat.LLMD:
            import yaml

            text = yaml.safe_dump_all(llmd_reports(results), sort_keys=False)
            write_output(output, text)
            consoles().err.print(f"{len(results.levels)} llm-d report(s) written to {output}", highlight=False)
            return
        columns, rows = ("level", "model", *CSV_COLUMNS, *LATENCY_COLUMNS), level_table(results)
    if fmt is ExportFormat.PARQUET:
        _write_parquet(output, columns, rows)
    else:
        write_output(output, _csv(columns, rows))
    what = "request" if records else "row"
    consoles().err.print(f"{len(rows)} {what}(s) written to {output} ({fmt})", highlight=False)


def _is_records(source: Path) -> bool:
    """Whether ``source`` is a --records file: JSON lines, where a results file is one JSON document."""
    try:
        with source.open("rb") as f:
            head = f.read(1 << 16)
    except OSError as exc:
        raise UsageError(f"FILE {source}: cannot read ({exc.strerror})") from None
    first = head.split(b"\n", 1)[0].strip()
    if source.suffix == ".jsonl" or (first.startswith(b"{") and first.endswith(b"}") and b"\n{" in head):
        try:
            return isinstance(json.loads(first), dict) and "t_intended" in json.loads(first)
        except ValueError:
            return False
    return False


def _csv(columns: tuple[str, ...], rows: list[dict[str, Any]]) -> str:
    from planner.reports.render_csv import spreadsheet_safe

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        cells = [row[c] for c in columns]
        writer.writerow(
            ["" if v is None else spreadsheet_safe(" ".join(map(str, v)) if isinstance(v, list) else v) for v in cells]
        )
    return buf.getvalue()


def _write_parquet(output: Path, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(PARQUET_MISSING) from None
    table = pa.Table.from_pylist([{c: row[c] for c in columns} for row in rows])
    try:
        pq.write_table(table, output)
    except OSError as exc:
        raise LoadgenError(f"-o {output}: cannot write ({exc})") from None


def register(app: typer.Typer) -> None:
    app.command("export")(export)
