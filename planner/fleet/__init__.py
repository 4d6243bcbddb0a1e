"""Fleet: demand over time, a fleet of replica variants sized per bucket, and its replay (pure)."""
