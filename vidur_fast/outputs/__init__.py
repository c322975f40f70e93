"""Run-directory writers and readers (`read_run(path)` gives the tables back as DataFrames)."""

__all__ = ["RunData", "read_run", "read_summary"]


def __getattr__(name: str):
    # the reader (and pandas behind it) loads on first use, not with the writer at start-up
    if name in __all__:
        from vidur_fast.outputs import reader

        return getattr(reader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
