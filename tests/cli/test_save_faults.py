"""A result is never lost at save time (issue 31, item 6): a full disk, a folder gone or read-only.

Real files and a real process: a file-size limit (``RLIMIT_FSIZE``) makes every write of the results
file fail with EFBIG as a full disk would, after ``-o`` was checked writable at the start.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from loadgen.results import Results, fallback_paths, load, save_with_fallback
from tests.planner.synthetic import law_sweep, sweep_results

RUN = ["run", "--url", "sim", "--virtual-time", "--concurrency", "2", "--requests", "20", "--max-tokens", "8"]


def _small_files_only() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))


# Under the limit the interpreter's own bytecode cache would be cut short (its write is not checked),
# and a truncated .pyc breaks every later import of that module: the limited process writes none.
NO_BYTECODE = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def test_a_run_that_cannot_write_anywhere_puts_its_results_on_stdout_and_exits_3(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "loadgen", *RUN, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_small_files_only,
        cwd=tmp_path,
        env=NO_BYTECODE,
    )
    assert done.returncode == 3, done.stderr
    assert f"-o {out}: cannot write (File too large), nor any fallback" in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr
    start = done.stdout.index('{\n  "schema"')
    _, end = json.JSONDecoder().raw_decode(done.stdout, start)  # the level table follows it
    results = Results.from_json(done.stdout[start:end])  # the whole measurement, readable by every command
    assert results.levels[0].completed == 20


def test_a_sweep_whose_checkpoints_fail_goes_on_and_keeps_every_level(tmp_path: Path) -> None:
    """A sweep died at its first checkpoint: now each failed checkpoint is said once and the sweep goes on."""
    profile = tmp_path / "p.yaml"
    profile.write_text("target: {sim: {}}\napi: completions\nworkload: {output_tokens: 8}\n"
                       "load: {levels: [1, 2], requests: 20, warmup_s: 0}\n")  # fmt: skip
    out = tmp_path / "s.json"
    done = subprocess.run(
        [sys.executable, "-m", "loadgen", "sweep", "--profile", str(profile), "--virtual-time", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_small_files_only,
        cwd=tmp_path,
        env=NO_BYTECODE,
    )
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    assert " ".join(done.stderr.split()).count("checkpoint failed (File too large); the sweep goes on") == 1
    start = done.stdout.index('{\n  "schema"')
    _, end = json.JSONDecoder().raw_decode(done.stdout, start)
    assert [lv.load.value for lv in Results.from_json(done.stdout[start:end]).levels] == [1, 2]


def test_a_save_whose_folder_is_gone_goes_to_the_stated_fallback(tmp_path: Path) -> None:
    results = sweep_results(law_sweep(25, 0.4, 64, (1, 4)))
    results = replace(results, run=replace(results.run, id=f"test-{os.getpid()}"))
    gone = tmp_path / "removed" / "sweep.json"
    where, why = save_with_fallback(results, gone)
    try:
        assert why is not None and where == fallback_paths(results, gone)[0] and not gone.exists()
        assert (
            json.loads(where.read_text())["levels"] and load(where).levels[0].completed == results.levels[0].completed
        )
        assert where.stat().st_mode & 0o077 == 0  # a fallback in a shared folder is its owner's alone
    finally:
        where.unlink(missing_ok=True)


def _limited(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, timeout=120,
                          preexec_fn=_small_files_only, cwd=cwd, env=NO_BYTECODE)  # fmt: skip


def test_a_full_disk_under_import_report_and_gate_is_one_line_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    """Issue 57 R5, R12: each command that writes a file the user named says it could not, in one line."""
    results = tmp_path / "s.json"
    results.write_text(sweep_results(law_sweep(25, 0.4, 64, (1, 4, 8))).to_json())
    table = tmp_path / "t.csv"
    table.write_text(
        "concurrency,tpot_p50_ms,requests_per_s\n" + "".join(f"{c},{25 + 0.4 * c},{c}\n" for c in (1, 2, 4))
    )
    cases = [
        (["import", str(table), "-o", "i.json"], "-o i.json: cannot write"),
        (["report", str(results), "-o", "r.md"], "-o r.md: cannot write"),
        (
            ["gate", str(results), *[f"--require=tpot_p50<{s}s" for s in range(1, 9)], "--junit", "j.xml"],
            "--junit j.xml: cannot write",
        ),  # eight checks at three levels: a JUnit file past the limit
    ]
    for args, message in cases:
        done = _limited(args, tmp_path)
        assert done.returncode == 3 and message in " ".join(done.stderr.split()), (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert not list(tmp_path.glob("*.tmp")), list(tmp_path.glob("*.tmp"))
