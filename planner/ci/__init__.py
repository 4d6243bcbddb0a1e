"""CI: the gate's checks, baseline comparison, and when a sweep stops early (pure)."""
