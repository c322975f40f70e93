"""Validation against aiconfigurator's silicon corpus (measured serving benchmarks)."""
