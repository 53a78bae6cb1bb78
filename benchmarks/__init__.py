"""Benchmarks: scripts run by hand (`python -m benchmarks.<name>`); they print figures and
assert plan shapes, never timings."""
