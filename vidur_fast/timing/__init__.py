"""Timing: operator samples from a source -> fitted per-operator models -> dense grids the
timing kernel reads (cached on disk by content hash)."""
