"""``python -m loadgen.sim serve-sim ...``: the simulator's own entry point.

The simulator child that tests and ``--url sim`` start imports only the
``serve-sim`` command and the simulator, not the whole CLI (the planner,
the client, rich tables): it starts in a fraction of the time.
"""

from __future__ import annotations

import typer

from loadgen.cli.serve_sim_cmd import register

app = typer.Typer(name="loadgen-sim", no_args_is_help=True, pretty_exceptions_show_locals=False)


@app.callback()
def _root() -> None:
    """The built-in simulated continuous-batching server."""


register(app)

if __name__ == "__main__":
    app()
