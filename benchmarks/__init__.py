"""Benchmarks of the machine: ratios against a baseline measured in the same run."""
