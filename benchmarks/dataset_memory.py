"""Peak memory of reading a JSON-lines prompt dataset, against the file's size.

Writes a dataset of N lines (``{"prompt": ...}`` of 500 words each) to a
temporary folder and reads it with ``load_dataset`` in a fresh process, whose
own peak RSS is reported. The lines are read one at a time: the peak should
stay near the size of the prompts held (a 1 GB file once peaked at 3.4 GB).

    python benchmarks/dataset_memory.py                  # 50,000 and 200,000 lines (125 MB, 500 MB)
    python benchmarks/dataset_memory.py --lines 10000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READ = (
    "import sys; from pathlib import Path; from loadgen.inputs.workload import load_dataset; "
    "print(len(load_dataset(Path(sys.argv[1]))))"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", default="50000,200000")
    args = parser.parse_args()
    print(f"{'lines':>8} {'file MiB':>9} {'peak RSS MiB':>13} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(v) for v in args.lines.split(",")):
            path = Path(tmp) / f"prompts{n}.jsonl"
            line = json.dumps({"prompt": "word " * 500}) + "\n"
            with path.open("w") as f:
                for _ in range(n):
                    f.write(line)
            proc = subprocess.Popen([sys.executable, "-c", READ, str(path)], cwd=ROOT, stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak
            if status != 0:
                raise SystemExit(f"reading {path} failed (status {status})")
            size, peak = path.stat().st_size / 2**20, usage.ru_maxrss / 1024.0
            print(f"{n:>8} {size:>9.0f} {peak:>13.0f} {peak / size:>6.2f}")
            path.unlink()


if __name__ == "__main__":
    main()
