"""vidur-fast: a fast LLM inference serving simulator."""

__version__ = "0.1.0"
