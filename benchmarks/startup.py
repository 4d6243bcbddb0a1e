"""How long ``loadgen <command> --help`` takes, process start to exit: the first thing a new user times.

Each command is run ``--rounds`` times in a fresh interpreter, interleaved, and the median wall time is
printed beside the floor of the same interpreter importing only typer's help renderer (what any typer CLI
pays). The target (issue 73): every command under 0.3 s on a 2-core machine. Nothing touches the network.

    python benchmarks/startup.py             # every command, 7 rounds, about 30 s
    python benchmarks/startup.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from loadgen.cli.commands import COMMANDS

FLOOR = [sys.executable, "-c", "import typer.rich_utils, typer._adapters"]


def wall_s(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    cli = [sys.executable, "-m", "loadgen"]
    runs: dict[str, list[str]] = {"(typer's floor)": FLOOR, "loadgen --help": [*cli, "--help"]}
    runs |= {f"loadgen {name} --help": [*cli, name, "--help"] for name in COMMANDS}
    times: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(rounds):
        for label, argv in runs.items():
            times[label].append(wall_s(argv))
    print(f"{'command':<28} {'median s':>9} {'max s':>7}")
    for label, seen in times.items():
        print(f"{label:<28} {statistics.median(seen):>9.2f} {max(seen):>7.2f}")


if __name__ == "__main__":
    main()
