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


def test_a_run_that_cannot_write_anywhere_puts_its_results_on_stdout_and_exits_3(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "loadgen", *RUN, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_small_files_only,
        cwd=tmp_path,
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
    finally:
        where.unlink(missing_ok=True)
