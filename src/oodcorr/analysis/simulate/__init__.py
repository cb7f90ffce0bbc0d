"""Simulated runs, series along curves and item-level studies, for the design, tests and benchmarks."""
