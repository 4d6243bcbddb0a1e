"""A fleet plan's cost as its demand grows: wall time and peak memory of ``loadgen plan --variant``.

The fleet replay once created every arrival of the period (``--qps 30000`` passed 3 GB in 36 s,
``--qps 1e6`` ended in a MemoryError); past ``planner.fleet.fleet_replay.MAX_REPLAYED`` arrivals it now
replays a sample of the fleet, so its cost grows with the buckets and a replica's own load. Each row
is one ``loadgen plan`` process (peak RSS from the kernel's accounting of the child). No network: the
variants' sweep is the quickstart profile in virtual time.

    python benchmarks/fleet_scale.py
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SLOS = ["--slo", "tpot_p95<50ms", "--slo", "ttft_p95<1s"]


def day_of_traffic(path: Path, peak_rps: float) -> Path:
    """24 hourly rows, a diurnal curve from 20% to 100% of ``peak_rps``."""
    rows = [f"{h * 3600},{peak_rps * (0.6 + 0.4 * math.sin(math.pi * (h - 6) / 12)):.0f}" for h in range(24)]
    path.write_text("time_s,qps\n" + "\n".join(rows) + "\n")
    return path


def measured(args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak MB, exit code) of one ``loadgen`` process: its own rusage, from ``wait4``."""
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "loadgen", *args], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024.0, child.returncode


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        sweep = work / "sweep.json"
        subprocess.run(
            [sys.executable, "-m", "loadgen", "sweep", "--profile", "quickstart", "--virtual-time", "--quiet",
             "-o", str(sweep)],
            check=True, capture_output=True,
        )  # fmt: skip
        two = ["--variant", f"x={sweep},cost=1.1", "--variant", f"y={sweep},cost=3.9,gpus=2"]
        cases = [
            ("30,000 req/s for an hour, two variants", [*two, "--qps", "30000"]),
            ("1,000,000 req/s for an hour, two variants", [*two, "--qps", "1000000"]),
            ("a day peaking at 30,000 req/s, 15 min buckets", [*two[:2], "--traffic", str(day_of_traffic(work / "a.csv", 3e4)), "--bucket", "15m"]),
            ("a day peaking at 1,000,000 req/s, 15 min buckets", [*two[:2], "--traffic", str(day_of_traffic(work / "b.csv", 1e6)), "--bucket", "15m"]),
        ]  # fmt: skip
        print(f"{'fleet plan':52} {'wall s':>8} {'peak MB':>8} {'exit':>5}")
        for name, args in cases:
            wall, peak, code = measured(["plan", *args, *SLOS])
            print(f"{name:52} {wall:8.2f} {peak:8.0f} {code:5d}")
    print("peak MB: the process's own peak RSS (ru_maxrss from wait4); each row is a fresh process")


if __name__ == "__main__":
    main()
