"""``loadgen tune`` against a 4 x 4 grid over the same two flags, on simulator laws no test uses.

For each law: ``loadgen tune`` from a generous batch cap and a small token budget (its restarts, wall
time and the configuration it verified), then every cell of the grid ``max_num_seqs`` x
``max_num_batched_tokens`` measured as a trial is (a server started at the cell, closed loop at the cap
and at the cap + 10%, each SLO judged at its level). The table says whether any grid cell that holds
every SLO serves more output tokens/s than tune's answer, and what each search cost in restarts.

    python benchmarks/tune_vs_grid.py                  # three laws, about 25 minutes
    python benchmarks/tune_vs_grid.py --laws A

Network traffic stays on 127.0.0.1; every server is stopped before the next starts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from loadgen.cli.tune_search import deciding_levels, judged, trial_levels
from loadgen.inputs.profile import load_profile
from loadgen.results import load
from loadgen.run.server_process import ServerOutcome, free_port, running_server

GRID_SEQS = (16, 32, 64, 128)
GRID_BUDGETS = (512, 1024, 2048, 4096)
SIM = f"{sys.executable} -m loadgen serve-sim --port {{port}} --max-num-seqs {{max_num_seqs}} --max-num-batched-tokens {{max_num_batched_tokens}}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Law:
    """A simulated server and the workload and SLOs it is tuned for."""

    name: str
    flags: str
    prompt: int
    output: int
    slo: str  # the profile's slo mapping, as YAML


LAWS = (
    Law(name="A", flags="--base-ms 15 --per-seq-ms 0.5 --prefill-ms-per-token 0.008", prompt=1024, output=48,
        slo="{tpot_p95_ms: 50, ttft_p95_ms: 400}"),
    Law(name="B", flags="--base-ms 22 --per-seq-ms 0.3 --per-kv-ms 0.15 --prefill-ms-per-token 0.004", prompt=512,
        output=64, slo="{tpot_p95_ms: 45, ttft_p95_ms: 300}"),
    Law(name="C", flags="--base-ms 10 --per-seq-ms 0.8 --prefill-ms-per-token 0.002 --prefill-attention-ms 0.4",
        prompt=2048, output=32, slo="{tpot_p95_ms: 60, ttft_p95_ms: 800}"),
)  # fmt: skip


def profile_text(law: Law) -> str:
    return (
        f"schema_version: 1\nname: tune-{law.name}\napi: chat\n"
        f"workload: {{prompt_tokens: {law.prompt}, output_tokens: {{mean: {law.output}, dist: lognormal, spread: 0.5}}}}\n"
        "load: {mode: closed, levels: [8, 24, 48], duration_s: 2, warmup_s: 1, retries: 2}\n"
        f"slo: {law.slo}\nseed: 7\n"
    )


def run_tune(law: Law, folder: Path, profile: Path) -> dict[str, object]:
    """``loadgen tune`` on the law: its record."""
    out = folder / f"tune-{law.name}.json"
    serve = f"{SIM} {law.flags}"
    subprocess.run(
        [sys.executable, "-m", "loadgen", "tune", "--serve-cmd", serve, "--profile", str(profile),
         "--set", "max_num_seqs=128", "--set", "max_num_batched_tokens=512", "-o", str(out), "--quiet"],
        check=False, capture_output=True, timeout=3600,
    )  # fmt: skip
    return dict(json.loads(out.read_text()))


def measure_cell(law: Law, seqs: int, budget: int, folder: Path, profile: Path) -> tuple[bool | None, float]:
    """One grid cell, measured as a tune trial is: whether it holds every SLO, and its output tok/s at the cap."""
    port = free_port()
    values = {"port": port, "max_num_seqs": seqs, "max_num_batched_tokens": budget}
    command = f"{SIM} {law.flags}".format(**values)
    url = f"http://127.0.0.1:{port}/v1"
    out = folder / f"grid-{law.name}-{seqs}-{budget}.json"
    levels = ",".join(str(c) for c in trial_levels(seqs))
    with running_server(command, url, folder / "grid.log", 60) as start:
        if start.outcome is not ServerOutcome.READY:
            return False, 0.0
        subprocess.run(
            [sys.executable, "-m", "loadgen", "sweep", "--profile", str(profile), "--url", url, "--levels", levels,
             "--no-stop", "-o", str(out), "--quiet"],
            check=False, capture_output=True, timeout=1200,
        )  # fmt: skip
    results = load(out)
    if len(results.levels) < 2:
        return None, 0.0
    _, holds, _ = judged(deciding_levels(results.levels, load_profile(profile).slo))
    return holds, results.levels[0].output_tokens_per_s or 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--laws", default="A,B,C")
    chosen = set(parser.parse_args().laws.split(","))
    print(f"{'law':>3} {'tune answer':>22} {'restarts':>8} {'tune s':>7} {'tok/s':>7}   "
          f"{'best grid cell':>22} {'grid restarts':>13} {'grid s':>7} {'tok/s':>7}  better?")  # fmt: skip
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for law in (law for law in LAWS if law.name in chosen):
            profile = folder / f"tune-{law.name}.yaml"
            profile.write_text(profile_text(law))
            started = time.monotonic()
            record = run_tune(law, folder, profile)
            tune_s = time.monotonic() - started
            verified = record.get("verified") or {}
            assert isinstance(verified, dict)
            answer = (verified.get("max_num_seqs"), verified.get("max_num_batched_tokens"))
            tune_rate = 0.0
            if answer[0] is not None:
                _, tune_rate = measure_cell(law, int(answer[0]), int(answer[1] or 8192), folder, profile)
            started = time.monotonic()
            cells = {(s, b): measure_cell(law, s, b, folder, profile) for s in GRID_SEQS for b in GRID_BUDGETS}
            grid_s = time.monotonic() - started
            holding = {cell: rate for cell, (holds, rate) in cells.items() if holds}
            best = max(holding, key=lambda cell: holding[cell]) if holding else None
            best_rate = holding[best] if best is not None else 0.0
            better = "yes" if best_rate > tune_rate * 1.02 else "no"
            print(f"{law.name:>3} {answer!s:>22} {record.get('restarts')!s:>8} {tune_s:>7.0f} {tune_rate:>7.0f}   "
                  f"{best!s:>22} {len(cells) - 1:>13} {grid_s:>7.0f} {best_rate:>7.0f}  {better}")  # fmt: skip


if __name__ == "__main__":
    main()
