"""A run: sessions of levels, where each level runs (this process, worker processes, Ray actors), the
runner that schedules requests, the metrics recorded from their records and the server's own gauges.
Only the command line prints or reads the environment."""
