"""How often does the gate catch a slower server, and how often does it fail a server that did not change?

The shipped ``ci-gate`` profile, swept in real time against the built-in
simulator (its own process, 127.0.0.1 only), ``--runs`` times for each law:
docs/design.md's 25 + 0.4b ms and the same law 10% and 20% slower on both terms.
The runs are interleaved (base, 10%, 20%, base, ...) so that drift of the
machine falls on every law alike. Then every ordered pair is gated, each
without the profile's SLOs (only the comparison can fail, as in the issue that
asked for this):

- detection: a baseline run against a slower run; caught when the gate exits 1
  naming a throughput or TPOT regression;
- false alarm: a baseline run against another baseline run; any exit 1.

Pairs share runs, so the rates are estimates over runs, not independent trials:
the table gives both counts. Exit 3 (the runner untrusted) is counted apart.

    python benchmarks/gate_power.py                 # 8 runs a law, about 7 minutes on 2 cores
    python benchmarks/gate_power.py --runs 4        # a quick look
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.results import Results, load  # noqa: E402
from planner.ci.gate import GateVerdict, evaluate_gate  # noqa: E402

BUSIEST = "c=32"  # the profile's higher level
CAUGHT_BY = {"tpot_p50", "tpot_p95", "output_tokens_per_s", "requests_per_s"}


def profile_for(slowdown: float, folder: Path) -> Path:
    """The ci-gate profile on a law ``slowdown`` slower, SLOs removed (the comparison alone decides)."""
    doc = yaml.safe_load((ROOT / "profiles" / "ci-gate.yaml").read_text())
    doc["target"] = {"sim": {"base_ms": 25.0 * (1 + slowdown), "per_seq_ms": 0.4 * (1 + slowdown)}}
    doc.pop("slo", None)
    path = folder / f"ci-gate-{slowdown:g}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def sweep(profile: Path, out: Path, seed: int) -> None:
    argv = [sys.executable, "-m", "loadgen", "sweep", "--profile", str(profile), "--seed", str(seed),
            "-o", str(out), "--quiet"]  # fmt: skip
    subprocess.run(argv, cwd=ROOT, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def gate(candidate: Results, baseline: Results) -> GateVerdict:
    """What ``loadgen gate CANDIDATE --baseline BASELINE`` decides, with no threshold checks."""
    return evaluate_gate(candidate, [], baseline=[baseline])


def caught(verdict: GateVerdict) -> bool:
    return verdict.exit_code == 1 and any(d.quantity in CAUGHT_BY for d in verdict.regressions)


def detectable(verdicts: list[GateVerdict], quantity: str) -> str:
    """The median smallest detectable change of one quantity at the busiest level, over the pairs."""
    values = sorted(
        d.detectable for v in verdicts for d in v.deltas if d.quantity == quantity and d.level == BUSIEST
        if d.detectable is not None
    )  # fmt: skip
    return f"±{values[len(values) // 2]:.1%}" if values else "-"


def row(name: str, verdicts: list[GateVerdict], hit: int | None) -> str:
    fails = sum(v.exit_code == 1 for v in verdicts)
    untrusted = sum(v.exit_code == 3 for v in verdicts)
    rate = (hit if hit is not None else fails) / len(verdicts)
    return (f"| {name} | {len(verdicts)} | {fails} | {'-' if hit is None else hit} | {rate:.0%} | {untrusted} | "
            f"{detectable(verdicts, 'tpot_p50')} | {detectable(verdicts, 'output_tokens_per_s')} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=8, help="sweeps per law")
    parser.add_argument("--slowdowns", default="0.1,0.2", help="slower laws, as fractions")
    args = parser.parse_args()
    slowdowns = [float(x) for x in args.slowdowns.split(",")]
    laws = [0.0, *slowdowns]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        profiles = {law: profile_for(law, folder) for law in laws}
        runs: dict[float, list[Path]] = {law: [] for law in laws}
        started = time.monotonic()
        for i in range(args.runs):
            for law in laws:
                out = folder / f"run-{law:g}-{i}.json"
                sweep(profiles[law], out, seed=100 + i)
                runs[law].append(out)
        swept_s = time.monotonic() - started
        results = {law: [load(path) for path in paths] for law, paths in runs.items()}
    base = results[0.0]
    print(f"ci-gate profile, {args.runs} real-time sweeps a law ({swept_s:.0f} s), gated pairwise, SLOs removed;")
    print(f"rate: false alarms (exit 1) for the same law, throughput or TPOT caught for a slower one; at {BUSIEST}:")
    print("| candidate | pairs | exit 1 | caught | rate | exit 3 | detectable TPOT p50 | detectable tok/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    same = [gate(b, a) for a, b in itertools.permutations(base, 2)]
    print(row("same law", same, None))
    for law in slowdowns:
        verdicts = [gate(b, a) for a, b in itertools.product(base, results[law])]
        print(row(f"{law:.0%} slower", verdicts, sum(caught(v) for v in verdicts)))


if __name__ == "__main__":
    main()
