"""Capacity: the SLO search, replica sizing, plans for a mix, predicted levels, replay and diagnosis (pure)."""
