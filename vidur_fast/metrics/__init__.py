"""Metrics: per-request tables and run summaries."""
