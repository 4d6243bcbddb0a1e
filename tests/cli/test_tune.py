"""``loadgen tune``'s server lifecycle and its mistakes (issue 72): each a named outcome, no server left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

PY = sys.executable


def tune(tmp_path: Path, serve_cmd: str, *extra: str, timeout: float = 120) -> tuple[int, str, dict[str, Any] | None]:
    out = tmp_path / "tune.json"
    proc = subprocess.run(
        [PY, "-m", "loadgen", "tune", "--serve-cmd", serve_cmd, "--profile", "quickstart", "-o", str(out), *extra],
        capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
    )  # fmt: skip
    record = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, proc.stdout + proc.stderr, record


def alive(marker: str) -> list[str]:
    """The processes whose command line holds ``marker`` (a server the test started)."""
    found = subprocess.run(["pgrep", "-f", "--", marker], capture_output=True, text=True).stdout.split()
    return [pid for pid in found if int(pid) != os.getpid()]


def test_a_configuration_the_server_refuses_is_a_named_trial_with_its_log(tmp_path: Path) -> None:
    refuse = (
        f"{PY} -c \"import sys; print('error: argument --max-num-seqs: invalid value {{max_num_seqs}}'); sys.exit(2)\""
    )
    code, said, record = tune(tmp_path, refuse)
    assert code == 3 and "Traceback" not in said, said
    assert record is not None and record["verified"] is None
    (trial,) = record["trials"]
    assert trial["server"] == "refused" and trial["verdict"] == "refused"
    assert trial["log_tail"] == ["error: argument --max-num-seqs: invalid value 256"]
    assert "no configuration verified: the calibration configuration did not start" in said
    assert "log: error: argument --max-num-seqs: invalid value 256" in said
    planned = subprocess.run([PY, "-m", "loadgen", "plan", str(tmp_path / "tune.json")], capture_output=True, text=True)
    assert planned.returncode == 3 and "a `loadgen tune` record, not a results file" in planned.stderr, planned.stderr


def test_a_server_that_never_answers_is_stopped_at_the_start_timeout(tmp_path: Path) -> None:
    marker = f"never-ready-{uuid.uuid4().hex}"
    hang = f"{PY} -c \"import time; print('loading weights'); time.sleep(120)\" {marker} {{max_num_seqs}}"
    started = time.monotonic()
    code, said, record = tune(tmp_path, hang, "--start-timeout", "2")
    assert code == 3 and time.monotonic() - started < 60, said
    assert record is not None and record["trials"][0]["server"] == "never_ready"
    assert record["trials"][0]["log_tail"] == ["loading weights"]
    assert not alive(marker)  # its whole group was stopped


@pytest.mark.parametrize(
    ("serve_cmd", "extra", "message"),
    [
        ("vllm serve m --port {port}", (), "the template has no {max_num_seqs} for the search to set"),
        ("vllm serve m --max-num-seqs {max_num_seqs} --dtype {dtype}", (), "no value for {dtype}: give --set dtype=N"),
        ("vllm serve m --max-num-seqs {max_num_seqs}", ("--set", "gpus=2"), "the templates have no {gpus} to set"),
        ("vllm serve m --max-num-seqs {max_num_seqs}", ("--set", "max_num_seqs=x"), "expected NAME=N"),
        ("vllm serve m --max-num-seqs {max_num_seqs", (), "template 'vllm serve m --max-num-seqs {max_num_seqs'"),
        ("vllm serve m --max-num-seqs {max_num_seqs}", ("--slo", "tpot_p95<"), "--slo"),
    ],
    ids=["no-seqs", "unset-name", "unknown-set", "set-not-a-number", "broken-template", "bad-slo"],
)
def test_mistakes_are_one_line_exit_2_before_any_server_starts(
    serve_cmd: str, extra: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    code, said, record = tune(tmp_path, serve_cmd, *extra)
    assert code == 2 and message in said and "Traceback" not in said, said
    assert record is None and not (tmp_path / "tune-logs").exists()


@pytest.mark.slow
def test_ctrl_c_in_the_middle_of_a_trial_stops_the_server_and_keeps_the_trials(tmp_path: Path) -> None:
    marker = f"--model tune-{uuid.uuid4().hex}"
    serve = f"{PY} -m loadgen serve-sim --port {{port}} {marker} --max-num-seqs {{max_num_seqs}}"
    out = tmp_path / "tune.json"
    proc = subprocess.Popen(
        [PY, "-m", "loadgen", "tune", "--serve-cmd", serve, "--profile", "quickstart", "--levels", "8,16,32",
         "--duration", "2", "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:  # the first level's line: the server answers, and the second level is under way
        if line.startswith("c=8"):
            break
    assert alive(marker)
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    assert proc.wait(60) == 130, rest
    assert "interrupted by SIGINT: the server was stopped" in rest and "Traceback" not in rest
    assert not alive(marker)
    record = json.loads(out.read_text())
    assert record["trials"][0]["verdict"] == "interrupted" and record["verified"] is None


PROFILE = """schema_version: 1
name: tune-test
api: chat
workload: {prompt_tokens: 256, output_tokens: {mean: 32, dist: lognormal, spread: 0.5}}
load: {mode: closed, levels: [8, 24, 48], duration_s: 2, warmup_s: 1}
slo: {tpot_p95_ms: 45, ttft_p95_ms: 500}
seed: 3
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tune_verifies_the_cap_on_a_law_with_prefill_and_kv_terms_in_a_few_restarts(tmp_path: Path) -> None:
    """Issue 72: a law no other test uses (base 18 ms, 0.55 ms a sequence, 0.2 ms per 1k KV tokens, prefill
    0.01 ms a token); the verified cap holds as measured and the next larger fails, with at most 4 restarts."""
    (tmp_path / "tune-test.yaml").write_text(PROFILE)
    marker = f"--model tune-{uuid.uuid4().hex}"
    serve = (f"{PY} -m loadgen serve-sim --port {{port}} {marker} --base-ms 18 --per-seq-ms 0.55 --per-kv-ms 0.2 "
             "--prefill-ms-per-token 0.01 --max-num-seqs {max_num_seqs}")  # fmt: skip
    out = tmp_path / "tune.json"
    proc = subprocess.run(
        [PY, "-m", "loadgen", "tune", "--serve-cmd", serve, "--profile", str(tmp_path / "tune-test.yaml"),
         "--set", "max_num_seqs=128", "--qps", "30", "-o", str(out), "--quiet"],
        capture_output=True, text=True, timeout=400, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(out.read_text())
    cap = record["verified"]["max_num_seqs"]
    by_cap = {t["config"]["max_num_seqs"]: t for t in record["trials"][1:-1] if t["holds"] is not None}
    assert by_cap[cap]["holds"] and by_cap[cap + 1]["holds"] is False, record["trials"]
    assert record["restarts"] <= 4 + 1  # four for the cap, one for the replicas' open-loop check
    at_cap = by_cap[cap]
    assert abs(at_cap["measured"]["tpot_p95_ms"] / at_cap["predicted_ms"]["tpot_p95_ms"] - 1) < 0.05, at_cap
    assert record["replicas"] is not None and record["trials"][-1]["holds"]
    assert proc.stdout.startswith(f"set --max-num-seqs {cap}  verified: {cap} holds every SLO as measured")
    assert not alive(marker)


@pytest.mark.slow
def test_a_tune_killed_outright_takes_its_server_with_it(tmp_path: Path) -> None:
    """SIGKILL (a CI job's hard timeout) leaves tune no cleanup: the server is told by the kernel instead."""
    marker = f"--model tune-{uuid.uuid4().hex}"
    serve = f"{PY} -m loadgen serve-sim --port {{port}} {marker} --max-num-seqs {{max_num_seqs}}"
    proc = subprocess.Popen(
        [PY, "-m", "loadgen", "tune", "--serve-cmd", serve, "--profile", "quickstart", "--levels", "8,16,32",
         "--duration", "2", "-o", str(tmp_path / "tune.json")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("c=8"):
            break
    assert alive(marker)
    proc.kill()
    proc.wait(30)
    deadline = time.monotonic() + 30
    while alive(marker) and time.monotonic() < deadline:
        time.sleep(0.2)  # polling the process table: the server's own shutdown is the event
    assert not alive(marker)


def test_a_profiles_tune_block_is_the_search_and_a_flag_overrides_it(tmp_path: Path) -> None:
    refuse = f"{PY} -c \"import sys; print('refused at {{max_num_seqs}} with {{dtype}}'); sys.exit(2)\""
    profile = tmp_path / "mine.yaml"
    profile.write_text(
        "schema_version: 1\nname: mine\nslo: {tpot_p95_ms: 50}\n"
        f"tune: {{serve_cmd: {json.dumps(refuse)}, set: {{max_num_seqs: 48, dtype: 2}}, start_timeout_s: 30}}\n"
    )
    out = tmp_path / "tune.json"
    run = [PY, "-m", "loadgen", "tune", "--profile", str(profile), "-o", str(out)]
    proc = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 3 and json.loads(out.read_text())["trials"][0]["log_tail"] == ["refused at 48 with 2"]
    proc = subprocess.run([*run, "--set", "max_num_seqs=7"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert json.loads(out.read_text())["trials"][0]["log_tail"] == ["refused at 7 with 2"], proc.stderr
    profile.write_text(profile.read_text().replace("start_timeout_s", "start_timeout"))
    proc = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "tune.start_timeout: unknown key; did you mean 'start_timeout_s'?" in proc.stderr
