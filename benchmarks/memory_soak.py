"""Does the generator's memory stay flat over a long run? (Records are folded into histograms, not kept.)

Runs ``loadgen run`` against the built-in simulator (its own process) at a
fixed concurrency for ``--minutes`` and samples the generator's resident set
size every ``--every`` seconds. Prints the samples and the growth between
the first and the last minute. Traffic goes to 127.0.0.1 only.

    python benchmarks/memory_soak.py                       # 10 minutes at concurrency 256
    python benchmarks/memory_soak.py --minutes 1 --concurrency 64
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--every", type=float, default=10.0)
    args = parser.parse_args()
    duration = args.minutes * 60
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "loadgen",
            "run",
            "--url",
            "sim",
            "--concurrency",
            str(args.concurrency),
            "--duration",
            str(duration),
            "--max-tokens",
            "64",
            "--prompt-tokens",
            "16",
            "--quiet",
            "-o",
            str(Path(tmp) / "r.json"),
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples: list[tuple[float, float]] = []
        start = time.monotonic()
        print(f"loadgen run --url sim --concurrency {args.concurrency} for {args.minutes:g} min; RSS of pid {proc.pid}")
        print(f"{'t (s)':>8} {'RSS (MiB)':>10}")
        while proc.poll() is None:
            rss = rss_mib(proc.pid)
            if rss is not None:
                t = time.monotonic() - start
                samples.append((t, rss))
                print(f"{t:>8.0f} {rss:>10.1f}", flush=True)
            time.sleep(args.every)
        proc.wait()
    steady = [r for t, r in samples if t >= 60] or [r for _, r in samples]
    if len(steady) >= 2:
        print(
            f"growth after the first minute: {steady[-1] - steady[0]:+.1f} MiB "
            f"({steady[0]:.1f} -> {steady[-1]:.1f} MiB, max {max(steady):.1f})"
        )


if __name__ == "__main__":
    main()
