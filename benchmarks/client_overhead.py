"""How much the load generator costs, and how wrong it is, against a target whose truth is known.

Starts ``mock_stream_server.py`` (fixed TTFT 50 ms, fixed 10 ms gap, 128
tokens, pre-serialised chunks) pinned to the last CPU, runs ``loadgen run``
pinned to the first CPU at each concurrency, and prints per level: the
client's CPU seconds (user+sys of the generator's processes only) per 1000
streamed tokens, achieved vs expected tokens/s, and the error of the
reported TTFT p50/p99 and TPOT p50/p99 against the truth. TTFT's truth is
what the mock did, not what it was told: each response's id carries when
the mock read the request and wrote the first chunk, and the run's
``--records`` keep it, so a target that falls behind on a busy machine is
not counted as the client's error (``per-req p99`` is the 99th percentile of
each request's own error). Then again with
``--workers 2``. With ``--ray`` the workers are Ray actors on a local Ray
instance (the start-up of Ray itself is outside the measured window). Last,
the "noisy neighbour" rows (``1+hog``): one worker again, with a CPU-bound
process pinned to its core for the whole level; where that makes the
numbers wrong, the level must say ``client-bound`` (``--neighbour-hogs 1,3``: one
hog, then three). Each row runs once per read path (``--paths``): the compiled
reader (``loadgen/wire/fastread.pyx``) and the Python path alone
(``LOADGEN_PURE_WIRE=1``), its reference.
Traffic goes to 127.0.0.1 only; every level is bounded.

    python benchmarks/client_overhead.py                  # the full table (about 3 minutes)
    python benchmarks/client_overhead.py --levels 1,64 --duration 3 --no-workers
    python benchmarks/client_overhead.py --levels 64,256 --ray   # 1 and 2 Ray actors (pip install '.[ray]')
    python benchmarks/client_overhead.py --levels 64,256,1024 --no-workers --paths compiled,python
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TTFT_MS, GAP_MS, TOKENS = 50.0, 10.0, 128
WARMUP_S = 2.0


def pin(cpu: int):  # type: ignore[no-untyped-def]
    def apply() -> None:
        if hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
            os.sched_setaffinity(0, {cpu})

    return apply


def start_server() -> tuple[subprocess.Popen[str], str]:
    cpus = os.cpu_count() or 1
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "mock_stream_server.py"), "--ttft-ms", str(TTFT_MS), "--gap-ms", str(GAP_MS)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=pin(cpus - 1),
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def expected_tok_s(concurrency: int) -> float:
    """What the mock target streams to ``concurrency`` closed-loop clients: the truth tok/s is measured against."""
    return concurrency * TOKENS / ((TTFT_MS + (TOKENS - 1) * GAP_MS) / 1000)


def run_level(
    url: str,
    concurrency: int,
    duration: float,
    workers: int,
    transport: str,
    ray: bool = False,
    event_loop: str = "auto",
    pure: bool = False,
    records: bool = True,
    api: str = "completions",
    model: str | None = None,
) -> dict[str, float]:
    """One ``loadgen run`` level in a pinned child; ``records``: write ``--records`` and hold TTFT to the
    mock's send times (``wire_floor`` leaves them out: its CPU is that of a run as a user starts it)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "loadgen",
            "run",
            "--url",
            url,
            "--api",
            api,
            "--concurrency",
            str(concurrency),
            "--duration",
            str(duration),
            "--warmup",
            str(WARMUP_S),
            "--max-tokens",
            str(TOKENS),
            "--prompt-tokens",
            "8",
            "--workers",
            str(workers),
            "--transport",
            transport,
            "--event-loop",
            event_loop,
            "--scrape-metrics",
            "off",
            "--json",
            "--quiet",
            "-o",
            str(Path(tmp) / "r.json"),
        ]
        cmd += ["--ray", "local"] if ray else []
        cmd += ["--model", model] if model is not None else []
        cmd += ["--records", str(Path(tmp) / "records.jsonl")] if records else []
        env = {**os.environ, "LOADGEN_PURE_WIRE": "1" if pure else "0"}  # the Python path alone, or compiled
        out = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pin(0), timeout=duration + 120, env=env)
        if out.returncode != 0:
            raise SystemExit(f"loadgen failed at c={concurrency}: {out.stderr.strip()[-300:]}")
        saved = json.loads((Path(tmp) / "r.json").read_text())
        level, read_path = saved["levels"][0], saved["settings"].get("read_path", "?")
        ttft = ttft_against_target(Path(tmp) / "records.jsonl", WARMUP_S) if records else {}
    s = json.loads(out.stdout)
    # CPU of the generator's own processes over the measured window (process_time in each
    # worker, summed), so interpreter start-up and the probe do not count
    cpu_s = level["client_cpu_s"]
    streamed = level["tokens"]["output_in_window"]
    return {
        "c": concurrency,
        "cpu_s_per_1k_tok": cpu_s / max(streamed, 1) * 1000,
        "tok_s": s["output_tokens_per_s"],
        "expected_tok_s": expected_tok_s(concurrency),
        **ttft,
        "tpot_p50_err": s["tpot_ms"]["p50"] - GAP_MS,
        "tpot_p99_err": s["tpot_ms"]["p99"] - GAP_MS,
        "lag_p99": s["lag_ms"]["p99"],
        "cpu_busy": cpu_s / (level["window_s"] * workers),
        "client_bound": s["client_bound"],
        "read_path": read_path,
    }


def ttft_against_target(records: Path, warmup_s: float) -> dict[str, float]:
    """Reported TTFT against the mock's own: per request sent after the warm-up, the client's
    ``t_first - t_sent`` and the mock's ``written - arrived`` (its response id), both on the system-wide
    monotonic clock. The p50/p99 errors are the reported percentile less the true one over the same
    requests; ``per-req p99`` is the 99th percentile of each request's own error."""
    reported, true = [], []
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    start = min(r["t_sent"] for r in rows) + warmup_s
    for r in rows:
        if r["error"] is None and not r["cut"] and r["t_first"] is not None and r["t_sent"] >= start:
            _, arrived_ns, written_ns = r["response_id"].split("-")
            reported.append((r["t_first"] - r["t_sent"]) * 1000)
            true.append((int(written_ns) - int(arrived_ns)) / 1e6)
    if not reported:
        raise SystemExit(f"no request after the warm-up named its send times in {records}")
    rep, tru = np.asarray(reported), np.asarray(true)
    return {
        "ttft_p50_err": float(np.percentile(rep, 50) - np.percentile(tru, 50)),
        "ttft_p99_err": float(np.percentile(rep, 99) - np.percentile(tru, 99)),
        "ttft_req_p99_err": float(np.percentile(rep - tru, 99)),
    }


@contextlib.contextmanager
def cpu_hog(cpu: int, count: int = 1) -> Iterator[None]:
    """``count`` CPU-bound processes pinned to ``cpu`` while the block runs (the noisy neighbours)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin(cpu)) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(timeout=10)


def server_late(url: str) -> int:
    """How many chunks the mock wrote more than 2 ms late so far (is the target keeping up?)."""
    import urllib.request

    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats", timeout=10) as resp:  # 127.0.0.1 only
        return int(json.loads(resp.read())["late_writes"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,16,64,256,512,1024")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--transport", default="native", help="native (default), aiohttp or httpx")
    parser.add_argument("--no-workers", action="store_true", help="skip the --workers 2 pass")
    parser.add_argument("--ray", action="store_true", help="run the workers as Ray actors (local Ray)")
    parser.add_argument(
        "--neighbour-levels", default="64,256", help="levels run again beside a CPU hog on the client's core ('' skips)"
    )
    parser.add_argument("--neighbour-hogs", default="1", help="how many hogs share the client's core, e.g. 1,3")
    parser.add_argument(
        "--paths", default="compiled", help="read paths per row: compiled, python (LOADGEN_PURE_WIRE=1), or both"
    )
    args = parser.parse_args()
    server, url = start_server()
    try:
        print(
            f"target: {url} (TTFT {TTFT_MS:g} ms, gap {GAP_MS:g} ms, {TOKENS} tokens); "
            f"{os.cpu_count()} CPUs, client on CPU 0, server on CPU {(os.cpu_count() or 1) - 1}; "
            f"transport {args.transport}" + ("; workers are Ray actors" if args.ray else "")
        )
        header = (
            f"{'workers':>7} {'path':>8} {'c':>5} {'CPU s/1k tok':>12} {'tok/s':>9} {'expected':>9} "
            f"{'TTFT p50 err':>12} {'TTFT p99 err':>12} {'per-req p99':>11} {'TPOT p50 err':>12} {'TPOT p99 err':>12} "
            f"{'lag p99':>8} {'client CPU':>10} {'server late':>11}"
        )
        print(header)
        paths = args.paths.split(",")
        passes = [(w, c, 0) for w in ([1] if args.no_workers else [1, 2]) for c in args.levels.split(",")]
        hogs = [int(h) for h in args.neighbour_hogs.split(",") if h]
        passes += [(1, c, h) for h in hogs for c in args.neighbour_levels.split(",") if c]
        for (workers, c, noisy), path in ((p, path) for p in passes for path in paths):
            with cpu_hog(0, noisy) if noisy else contextlib.nullcontext():
                late_before = server_late(url)
                r = run_level(url, int(c), args.duration, workers, args.transport, args.ray, pure=path == "python")
                late = server_late(url) - late_before
                label = f"{workers}+{noisy}hog" if noisy else str(workers)
                print(
                    f"{label:>7} {r['read_path']:>8} {int(c):>5} {r['cpu_s_per_1k_tok']:>12.4f} {r['tok_s']:>9.0f} "
                    f"{r['expected_tok_s']:>9.0f} {r['ttft_p50_err']:>+10.1f}ms {r['ttft_p99_err']:>+10.1f}ms "
                    f"{r['ttft_req_p99_err']:>+9.1f}ms {r['tpot_p50_err']:>+10.2f}ms {r['tpot_p99_err']:>+10.2f}ms {r['lag_p99']:>6.1f}ms"
                    f" {r['cpu_busy']:>10.0%} {late:>11}" + ("  client-bound" if r["client_bound"] else ""),
                    flush=True,
                )
                time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
