"""Numerics every stage shares: results that do not depend on the CPU they run on."""
