"""Shared fixtures: the read-only ../shared data dir and small engine helpers."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# session fixtures with small simulated runs, shared by the output tests
pytest_plugins = ["tests.unit.outputs_fixtures"]


# CLI flags for a quick run: roofline timing on small grids (a grid-cache miss costs ~1 s)
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


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not present")
    return SHARED
