"""``python -m loadgen.sim``: the simulator as a child process (``SimProcess``: tests, ``--url sim``).

Its whole configuration arrives as one line of JSON on standard input
(``SimOptions.to_json``): the child imports only the simulator, none of the
command line, and an API key it must require never shows in a process
listing. It writes the bare URL to standard output once it listens (the
parent's readiness signal) and the law it runs to standard error, then
serves until its standard input ends (the parent gone, however it went) or
a stop signal arrives. ``loadgen serve-sim`` is the command for people.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from loadgen.sim.openai_app import SimOptions
from loadgen.sim.server import serve_forever

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadgen.sim", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    options = SimOptions.from_json(json.loads(sys.stdin.readline()))
    asyncio.run(_serve(options, args.host, args.port))


async def _serve(options: SimOptions, host: str, port: int) -> None:
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:  # the server closes cleanly
        loop.add_signal_handler(sig, done.set)

    def ready(bound: int) -> None:
        sys.stderr.write(f"simulator ({options.engine.law_text}) on http://{host}:{bound}/v1\n")
        sys.stderr.flush()
        sys.stdout.write(f"http://{host}:{bound}/v1\n")
        sys.stdout.flush()

    await serve_forever(options, host, port, ready, until_stdin_closes=True, done=done)


if __name__ == "__main__":
    main()
