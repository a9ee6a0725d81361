"""Benchmarks: each ends with one JSON line and runs from the repository root as `python -m bench.NAME`;
results and their commands are in docs/benchmarks.md."""
