"""How `loadgen report` and `loadgen import` scale with the number of levels: wall time and peak memory.

Builds synthetic sweeps of an ideal 25 + 0.4b server (no sockets) in a helper
process, writes them to a temporary folder, and times `loadgen report` on each
in a fresh process (this process stays small, so a forked child's peak memory
is its own).

Then `loadgen import` of a per-level CSV table of 3,000 rows (kept) and of
100,000 rows (past the 5,000-level limit: refused in one line, without
reading it into levels).

    python benchmarks/report_scale.py                  # 100, 1000, 3000 levels; md and html; imports
    python benchmarks/report_scale.py --levels 300 --formats md --import-rows 1000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.results import save_atomic  # noqa: E402
from tests.planner.synthetic import law_sweep, sweep_results  # noqa: E402


def run(results: Path, out: Path) -> tuple[float, float]:
    """Seconds and peak RSS (MiB) of one `loadgen report` in its own process."""
    seconds, rss, status = measure(["report", str(results), "-o", str(out), "--slo", "tpot_p95<40ms"])
    if status != 0:
        raise SystemExit(f"loadgen report failed on {results} (status {status})")
    return seconds, rss


def measure(args: list[str]) -> tuple[float, float, int]:
    """Seconds, peak RSS (MiB) and exit status of one loadgen command in its own process."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "loadgen", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the largest child's so far
    return time.perf_counter() - t, usage.ru_maxrss / 1024.0, os.waitstatus_to_exitcode(status)


def table(rows: int, path: Path) -> None:
    """A per-level CSV table as a vendor publishes one: percentiles, means, throughput."""
    lines = ["concurrency,ttft_p50_ms,ttft_p95_ms,tpot_p50_ms,tpot_p95_ms,e2e_p50_ms,e2e_mean_ms,output_tokens,"
             "requests_per_s"]  # fmt: skip
    for c in range(1, rows + 1):
        tpot = 25 + 0.4 * c
        lines.append(f"{c},{100 + c:.1f},{150 + c:.1f},{tpot:.2f},{tpot * 1.1:.2f},{tpot * 128:.0f},"
                     f"{tpot * 130:.0f},128,{c / (tpot * 0.128):.3f}")  # fmt: skip
    path.write_text("\n".join(lines) + "\n")


def make(n: int, path: Path) -> None:
    save_atomic(sweep_results(law_sweep(25.0, 0.4, 128, tuple(range(1, n + 1)), n=60)), path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="100,1000,3000")
    parser.add_argument("--formats", default="md,html")
    parser.add_argument("--import-rows", default="3000,100000")
    parser.add_argument("--make", nargs=2, metavar=("LEVELS", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make:
        make(int(args.make[0]), Path(args.make[1]))
        return
    print(f"{'levels':>7} {'format':>6} {'seconds':>8} {'peak RSS MiB':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(v) for v in args.levels.split(",")):
            path = Path(tmp) / f"sweep{n}.json"
            subprocess.run([sys.executable, __file__, "--make", str(n), str(path)], check=True)
            for fmt in args.formats.split(","):
                seconds, rss = run(path, Path(tmp) / f"report{n}.{fmt}")
                print(f"{n:>7} {fmt:>6} {seconds:>8.1f} {rss:>13.0f}")
        print(f"\n{'rows':>7} {'import':>9} {'seconds':>8} {'peak RSS MiB':>13}")
        for n in (int(v) for v in args.import_rows.split(",") if v):
            path = Path(tmp) / f"table{n}.csv"
            table(n, path)
            seconds, rss, status = measure(["import", str(path), "-o", str(Path(tmp) / f"imported{n}.json")])
            outcome = "kept" if status == 0 else "refused" if status == 2 else f"exit {status}"
            print(f"{n:>7} {outcome:>9} {seconds:>8.1f} {rss:>13.0f}")


if __name__ == "__main__":
    main()
