"""vidur-fast: a fast LLM inference serving simulator."""
