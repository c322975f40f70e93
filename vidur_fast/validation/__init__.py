"""Measured serving benchmarks: read them, simulate each row's deployment and load, report the
error per row and per group."""
