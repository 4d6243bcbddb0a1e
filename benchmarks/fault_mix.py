"""Are failures counted by kind at the rates a server injects them? (A load tester is used when things break.)

Sweeps one closed-loop level against the built-in simulator with a fault mix
(429s, dropped connections, malformed chunks, hung streams) and compares the
failures counted by kind with the injected probabilities, each with its
binomial 95% interval. Traffic goes to 127.0.0.1 only.

    python benchmarks/fault_mix.py                     # c=32 for 20 s, --timeout 3
    python benchmarks/fault_mix.py --duration 60 --concurrency 64
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.results import load  # noqa: E402

INJECTED = {"http_429": 0.20, "drop": 0.10, "malformed": 0.05, "hang": 0.05}
COUNTED_AS = {"http_429": "http_429", "drop": "stream_broken", "malformed": "malformed_chunk", "hang": "timeout"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args()
    faults = ", ".join(f"{k}: {v}" for k, v in INJECTED.items())
    with tempfile.TemporaryDirectory() as tmp:
        profile, out = Path(tmp) / "faults.yaml", Path(tmp) / "faults.json"
        profile.write_text(
            f"target: {{sim: {{seed: 7, faults: {{{faults}}}}}}}\napi: completions\n"
            "workload: {output_tokens: 16, prompt_tokens: 16}\n"
            f"load: {{levels: [{args.concurrency}], duration_s: {args.duration}, warmup_s: 2}}\n"
        )
        subprocess.run([sys.executable, "-m", "loadgen", "sweep", "--profile", str(profile), "-o", str(out),
                        "--quiet", "--timeout", str(args.timeout)], cwd=ROOT, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        level = load(out).levels[0]
    total = level.completed + level.failed
    print(
        f"c={args.concurrency}, {args.duration:g} s, --timeout {args.timeout:g}: {total} requests finished in the window"
    )
    print(f"{'fault':>10} {'counted as':>16} {'injected':>9} {'measured':>9} {'95% interval':>17} {'ok':>3}")
    for fault, p in INJECTED.items():
        kind = COUNTED_AS[fault]
        n = sum(v for k, v in level.errors.items() if k.value == kind)
        half = 1.96 * math.sqrt(p * (1 - p) / total) if total else math.nan
        ok = abs(n / total - p) <= half if total else False
        print(f"{fault:>10} {kind:>16} {p:>9.3f} {n / total if total else math.nan:>9.3f} "
              f"{p - half:>8.3f}..{p + half:<8.3f} {'yes' if ok else 'NO':>3}")  # fmt: skip


if __name__ == "__main__":
    main()
