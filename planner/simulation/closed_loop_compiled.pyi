"""Types of the compiled closed loop (``closed_loop_compiled.pyx``): ``planner.simulation.closed_loop.serve_reference``'s."""

import numpy as np

def serve(
    starts: np.ndarray,
    prompts: np.ndarray,
    outputs: np.ndarray,
    warmup: int,
    base: float,
    per_seq: float,
    per_kv: float,
    per_token: float,
    per_pair: float,
    cap: int,
    budget: int,
    kv_capacity: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
