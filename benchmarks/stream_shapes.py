"""The client's CPU per streamed token for each shape of stream, side by side in one run (issue 71).

A reasoning model's thoughts, an agent's tool-call arguments and a plain answer are all one token a
chunk; the compiled reader takes each kind itself, so each should cost what the answer does. Every
shape streams from ``mock_stream_server.py`` (TTFT 50 ms, gap 10 ms, 128 tokens; chat deltas shaped by
the model named: ``bench``, ``bench-reasoning``, ``bench-tool``), pinned to the last CPU, the client to
the first; shapes are interleaved round by round, and each row's ratio is to the chat answer of the same
run. ``--pure`` adds each shape on the pure-Python read path (``LOADGEN_PURE_WIRE=1``). Traffic goes to
127.0.0.1 only.

    python benchmarks/stream_shapes.py                          # c=256, 3 rounds, about 3 minutes
    python benchmarks/stream_shapes.py --concurrency 64 --rounds 1 --duration 5 --pure
"""

from __future__ import annotations

import argparse
import statistics

from client_overhead import run_level, start_server

SHAPES = {  # label: (api, model)
    "completions text": ("completions", None),
    "chat answer": ("chat", "bench"),
    "chat reasoning (half thoughts)": ("chat", "bench-reasoning"),
    "chat tool-call arguments": ("chat", "bench-tool"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pure", action="store_true", help="each shape on the pure-Python read path too")
    args = parser.parse_args()
    runs = [(label, api, model, False) for label, (api, model) in SHAPES.items()]
    if args.pure:
        runs += [(f"{label}, Python path", api, model, True) for label, (api, model) in SHAPES.items()]
    cpu: dict[str, list[float]] = {label: [] for label, *_ in runs}
    server, url = start_server()
    try:
        for _ in range(args.rounds):
            for label, api, model, pure in runs:
                level = run_level(url, args.concurrency, args.duration, 1, "native", pure=pure, records=False,
                                  api=api, model=model)  # fmt: skip
                cpu[label].append(level["cpu_s_per_1k_tok"])
    finally:
        server.terminate()
    answer = statistics.median(cpu["chat answer"])
    print(f"c={args.concurrency}, {args.rounds} round(s), medians")
    print(f"{'stream':<46} {'CPU ms / 1k tok':>16} {'x chat answer':>14}")
    for label, seen in cpu.items():
        median = statistics.median(seen)
        print(f"{label:<46} {median * 1000:>16.1f} {median / answer:>14.2f}")


if __name__ == "__main__":
    main()
