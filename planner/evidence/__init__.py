"""Evidence: what a sweep measured, read as observations, per-level values and trust verdicts (pure)."""
