"""CLI flag sets shared by tests."""

# a quick run: roofline timing on small grids (a grid-cache miss costs ~1 s)
FAST_TIMING_ARGS = [
    "--predictor.source",
    "roofline",
    "--predictor.max-tokens",
    "8192",
    "--predictor.max-prefill-chunk",
    "4096",
    "--predictor.max-batch-size",
    "64",
]
