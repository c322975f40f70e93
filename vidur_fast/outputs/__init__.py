"""Run-directory writers and readers (`read_run(path)` gives the tables back as DataFrames)."""

from vidur_fast.outputs.reader import RunData, read_run, read_summary

__all__ = ["RunData", "read_run", "read_summary"]
