"""vidur-fast: a fast LLM inference serving simulator.

    from vidur_fast import SimConfig, simulate, read_run
    result = simulate(SimConfig())          # in memory; nothing written
    result.summary["prefill_e2e_time"]["p99"]

The names below are loaded on first use, so `import vidur_fast` stays cheap.
"""

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "simulate": "vidur_fast.api",
    "SimConfig": "vidur_fast.config.sim",
    "Result": "vidur_fast.metrics.result",
    "read_run": "vidur_fast.outputs.reader",
    "write_run": "vidur_fast.outputs.writer",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'vidur_fast' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
