"""Inputs: the files a run or a plan reads (profiles, datasets, traces, traffic series, other tools'
results), each turned into loadgen's own types with one-line errors naming the file, line and field.
No sockets."""
