"""planner: pure capacity-planning math on recorded results (no network, clock or event loop)."""

__all__: list[str] = []
