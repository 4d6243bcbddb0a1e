"""Simulate: a replica served by the fitted engine in virtual time, open-loop or closed-loop (pure)."""
