"""Types of the compiled event loop (``replica_sim_compiled.pyx``): ``planner.simulation.replica_sim.serve_reference``'s."""

import numpy as np

def serve(
    arrivals: np.ndarray,
    outs: np.ndarray,
    prompts: np.ndarray,
    base: float,
    slope: float,
    cap: int,
    g: float,
    per_token: float,
    per_pair: float,
    budget: float,
    kv_capacity: float,
) -> tuple[np.ndarray, np.ndarray]: ...
