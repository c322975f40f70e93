"""Run-directory writers."""
