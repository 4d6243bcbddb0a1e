"""``loadgen run`` end to end against the simulator: files, exit codes, one-line errors, secrets."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.results import load
from loadgen.sim.openai_app import SimOptions
from loadgen.sim.server import SimProcess
from loadgen.wire import native

KEY = "sk-test-SECRET-0123456789"
runner = CliRunner()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(SimOptions(api_key=KEY)) as server:
        yield server


def invoke(args: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return runner.invoke(app, args, env=env or {})


def test_run_writes_results_and_never_the_key(sim: SimProcess, tmp_path: Path) -> None:
    out, records = tmp_path / "r.json", tmp_path / "rec.jsonl"
    result = invoke(
        [
            "run",
            "--url",
            sim.base_url,
            "--concurrency",
            "4",
            "--requests",
            "12",
            "--max-tokens",
            "8",
            "--header",
            f"X-Secret-Token:{KEY}-hdr",
            "-o",
            str(out),
            "--records",
            str(records),
            "--json",
        ],
        env={"OPENAI_API_KEY": KEY},
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["completed"] == 12 and summary["failed"] == 0
    loaded = load(out)
    assert loaded.complete and loaded.target.model == "sim-model"
    assert loaded.settings.other["headers"] == {"X-Secret-Token": "<redacted>"}
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(rows) == 12 and {r["load"] for r in rows} == {"c=4"}
    for text in (out.read_text(), records.read_text(), result.output):
        assert KEY not in text


@pytest.mark.slow
def test_run_with_two_worker_processes(sim: SimProcess, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = invoke(
        [
            "run",
            "--url",
            sim.base_url,
            "--api-key",
            KEY,
            "--concurrency",
            "4",
            "--duration",
            "2",
            "--warmup",
            "1",  # the clients' staggered start stays out of the window, however slowly the workers start
            "--max-tokens",
            "8",
            "--workers",
            "2",
            "-o",
            str(out),
            "--quiet",
        ]
    )
    assert result.exit_code == 0, result.output
    level = load(out).levels[0]
    assert level.workers == 2 and level.completed > 0
    assert level.achieved_concurrency == pytest.approx(4, rel=0.1)
    placed = load(out).settings.other["worker_placement"]  # issue 71: where the workers ran is said
    assert placed.startswith(("pinned: worker 0 on core", "not pinned: ")), placed


def test_wrong_key_is_one_line_exit_3(sim: SimProcess, tmp_path: Path) -> None:
    result = invoke(
        [
            "run",
            "--url",
            sim.base_url,
            "--api-key",
            "nope",
            "--concurrency",
            "1",
            "--requests",
            "1",
            "-o",
            str(tmp_path / "r.json"),
        ]
    )
    assert result.exit_code == 3
    assert "401" in result.stderr and "--api-key" in result.stderr
    assert "Traceback" not in result.output


def test_wrong_path_is_explained(sim: SimProcess, tmp_path: Path) -> None:
    url = sim.base_url.removesuffix("/v1") + "/api"
    result = invoke(
        ["run", "--url", url, "--api-key", KEY, "--concurrency", "1", "--requests", "1", "-o", str(tmp_path / "r.json")]
    )
    assert result.exit_code == 3 and "404" in result.stderr and "the base URL usually ends in /v1" in result.stderr
    wrong = invoke(
        ["run", "--url", url + "/v1", "--concurrency", "1", "--requests", "1", "-o", str(tmp_path / "r.json")]
    )
    assert wrong.exit_code == 3 and "usually ends in /v1" not in wrong.stderr  # issue 73: it did end in /v1
    assert "nothing there serves the OpenAI API: check the host, the port and the path" in wrong.stderr


def test_a_wrong_model_name_shows_the_servers_reason_and_the_models_served(sim: SimProcess, tmp_path: Path) -> None:
    args = ["run", "--url", sim.base_url, "--api-key", KEY, "--model", "no-such-model", "--concurrency", "1"]
    result = invoke([*args, "--requests", "1", "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "HTTP 404: The model `no-such-model` does not exist" in lines[0]
    assert "/models lists: sim-model" in lines[0] and "Traceback" not in result.output


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_url_is_one_line_exit_3(tmp_path: Path) -> None:
    result = invoke(
        [
            "run",
            "--url",
            f"http://127.0.0.1:{free_port()}/v1",
            "--concurrency",
            "1",
            "--requests",
            "1",
            "-o",
            str(tmp_path / "r.json"),
        ]
    )
    assert result.exit_code == 3
    assert "cannot connect" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0", "--requests", "1"], "--concurrency"),
        (["--rate", "-2", "--requests", "1"], "--rate"),
        (["--concurrency", "1", "--rate", "2", "--requests", "1"], "exactly one of"),
        (["--concurrency", "1"], "--duration"),
        (["--concurrency", "1", "--requests", "1", "--extra-body", "[1]"], "--extra-body"),
        (["--concurrency", "1", "--requests", "1", "--header", "novalue"], "--header"),
        (["--concurrency", "1", "--requests", "1", "--api", "images"], "--api"),
        (["--concurrency", "1", "--requests", "1", "--url", "ftp://x"], "--url"),
    ],
)
def test_bad_flags_exit_2_with_the_flag_named(args: list[str], message: str, tmp_path: Path) -> None:
    base = ["run", "--url", "http://127.0.0.1:9/v1", "-o", str(tmp_path / "r.json")]
    result = invoke(base + args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_unwritable_output_fails_before_the_run(tmp_path: Path) -> None:
    result = invoke(
        [
            "run",
            "--url",
            "http://127.0.0.1:9/v1",
            "--concurrency",
            "1",
            "--requests",
            "1",
            "-o",
            str(tmp_path / "missing-dir" / "r.json"),
        ]
    )
    assert result.exit_code == 2 and "-o" in result.stderr


def test_no_artefact_or_message_ever_contains_the_key(sim: SimProcess, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    outputs = []
    env = {"OPENAI_API_KEY": KEY}
    for args in (
        [
            "run",
            "--url",
            sim.base_url,
            "--concurrency",
            "2",
            "--requests",
            "6",
            "--max-tokens",
            "4",
            "--header",
            f"X-Token:{KEY}",
            "-o",
            str(out),
            "--records",
            str(tmp_path / "rec.jsonl"),
        ],
        ["report", str(out), "-o", str(tmp_path / "r.md")],
        ["report", str(out), "-o", str(tmp_path / "r.html")],
        ["report", str(out), "-o", str(tmp_path / "r.csv")],
        [
            "gate",
            str(out),
            "--require",
            "tpot_p50 < 1s",
            "--junit",
            str(tmp_path / "j.xml"),
            "--summary-md",
            str(tmp_path / "s.md"),
        ],
        ["plan", str(out), "--json"],
        [
            "run",
            "--url",
            sim.base_url,
            "--api-key",
            KEY + "-wrong",
            "--concurrency",
            "1",
            "--requests",
            "1",
            "-o",
            str(tmp_path / "bad.json"),
        ],  # an error path: its message must not echo the key either
    ):
        result = runner.invoke(app, args, env=env)
        outputs.append(result.output)
    artefacts = [p.read_text(errors="replace") for p in tmp_path.iterdir() if p.is_file()]
    assert len(artefacts) >= 7
    for text in artefacts + outputs:
        assert KEY not in text


def test_a_level_with_no_completed_request_exits_3(sim: SimProcess, tmp_path: Path) -> None:
    # Both requests finish inside the warm-up: nothing was measured, which is never a success.
    args = ["run", "--url", sim.base_url, "--api-key", KEY, "--concurrency", "1", "--requests", "2"]
    result = invoke([*args, "--warmup", "30", "--max-tokens", "4", "-o", str(tmp_path / "r.json"), "--quiet"])
    assert result.exit_code == 3 and "every request was spent in the warm-up" in result.stderr
    assert load(tmp_path / "r.json").levels[0].completed == 0  # the file is still written


def test_the_url_defaults_to_openai_base_url(sim: SimProcess, tmp_path: Path) -> None:
    args = ["run", "--concurrency", "1", "--requests", "2", "--max-tokens", "4", "-o", str(tmp_path / "r.json")]
    result = invoke(args, env={"OPENAI_BASE_URL": sim.base_url, "OPENAI_API_KEY": KEY})
    assert result.exit_code == 0, result.output
    assert load(tmp_path / "r.json").levels[0].completed >= 1


def test_progress_in_a_log_is_plain_lines_and_quiet_is_silent(sim: SimProcess, tmp_path: Path) -> None:
    # CliRunner's stderr is not a terminal, as in CI: plain lines, no live display.
    args = ["run", "--url", sim.base_url, "--api-key", KEY, "--concurrency", "2", "--requests", "6",
            "--max-tokens", "4", "-o", str(tmp_path / "r.json")]  # fmt: skip
    shown = invoke(args)
    assert shown.exit_code == 0, shown.output
    assert "c=2: 6 done, 0 failed, TTFT p50" in shown.stderr and "\r" not in shown.stderr
    assert len([line for line in shown.stderr.splitlines() if line.startswith("c=2")]) == 1  # one line a level
    quiet = invoke([*args, "--quiet"])
    assert "done" not in quiet.stderr


def test_each_request_carries_an_id_the_server_logs_and_records_keep_both(sim: SimProcess, tmp_path: Path) -> None:
    # vLLM (and the simulator) build the response id from X-Request-Id: the two ids join up in logs.
    records = tmp_path / "rec.jsonl"
    args = ["run", "--url", sim.base_url, "--api-key", KEY, "--concurrency", "2", "--requests", "6",
            "--max-tokens", "4", "--records", str(records), "-o", str(tmp_path / "r.json"), "--quiet"]  # fmt: skip
    assert invoke(args).exit_code == 0
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len({r["request_id"] for r in rows}) == len(rows) == 6
    assert all(r["response_id"] == f"chatcmpl-{r['request_id']}" for r in rows)
    custom = invoke([*args, "--request-id-header", "X-Trace-Id"])
    assert custom.exit_code == 0
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert all(
        r["request_id"] and not r["response_id"].endswith(r["request_id"]) for r in rows
    )  # sim reads X-Request-Id
    none = invoke([*args, "--request-id-header", ""])
    assert none.exit_code == 0 and all(
        json.loads(line)["request_id"] is None for line in records.read_text().splitlines()
    )
    bad = invoke([*args, "--request-id-header", "X Bad:"])
    assert bad.exit_code == 2 and "--request-id-header" in bad.stderr


def test_run_and_an_equivalent_profile_assemble_the_same_session(sim: SimProcess, tmp_path: Path) -> None:
    # `run` builds a one-level profile from its flags and goes through the sweep's assembly: the same
    # level plan, workload and settings come out, whichever command asked.
    flags = ["--prompt-tokens", "16", "--prompt-dist", "uniform", "--prompt-spread", "0.5", "--max-tokens", "4",
             "--seed", "3", "--warmup", "0", "--requests", "6", "--api-key", KEY, "--quiet"]  # fmt: skip
    profile = tmp_path / "same.yaml"
    profile.write_text(
        "name: same\nworkload: {prompt_tokens: {mean: 16, dist: uniform, spread: 0.5}, output_tokens: 4}\n"
        "load: {levels: [2], requests: 6, warmup_s: 0, duration_s: 600}\nseed: 3\n"
    )
    ran, swept = tmp_path / "run.json", tmp_path / "sweep.json"
    run = invoke(["run", "--url", sim.base_url, "--concurrency", "2", "--duration", "600", *flags, "-o", str(ran)])
    assert run.exit_code == 0, run.output
    sweep = invoke(["sweep", "--url", sim.base_url, "--profile", str(profile), "--api-key", KEY, "--quiet",
                    "-o", str(swept)])  # fmt: skip
    assert sweep.exit_code == 0, sweep.output
    by_run, by_sweep = load(ran).settings.to_json(), load(swept).settings.to_json()
    for settings in (by_run, by_sweep):
        del settings["profile"]["name"], settings["profile"]["description"]
        del settings["profile"]["url"], settings["profile"]["target"], settings["profile"]["sim"]
    assert by_run == by_sweep
    assert by_run["levels"][0]["seed"] == 3 and by_run["prompt_tokens"]["dist"] == "uniform"


@pytest.mark.parametrize("event_loop", ["auto", "asyncio"])
def test_the_results_record_which_event_loop_ran(sim: SimProcess, tmp_path: Path, event_loop: str) -> None:
    out = tmp_path / "r.json"
    result = invoke(["run", "--url", sim.base_url, "--api-key", KEY, "--concurrency", "4", "--requests", "12",
                     "--max-tokens", "4", "--event-loop", event_loop, "--quiet", "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    results = load(out)
    # uvloop is a dependency wherever it is built (not on Windows): auto takes it
    assert results.settings.event_loop == ("asyncio" if event_loop == "asyncio" else "uvloop")
    # and how the bodies were read: the compiled reader wherever it was built and not switched off
    assert results.settings.other["read_path"] == ("compiled" if native.FASTREAD is not None else "python")
    assert results.levels[0].completed == 12 and results.levels[0].failed == 0


def test_a_library_transports_read_path_is_its_own(sim: SimProcess, tmp_path: Path) -> None:
    """Issue 57: --transport aiohttp said read_path python, the pure native path's name."""
    out = tmp_path / "r.json"
    result = invoke(["run", "--url", sim.base_url, "--api-key", KEY, "--concurrency", "2", "--requests", "4",
                     "--max-tokens", "4", "--transport", "aiohttp", "--quiet", "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert load(out).settings.other["read_path"] == "aiohttp"
