"""Sweeps and capacity search: grids of configs run in parallel (process pool or Ray),
resumable result tables, maximum QPS under latency SLOs, cost and Pareto frontiers."""
