"""Shared fixtures: the read-only ../shared data dir and small engine helpers."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# session fixtures with small simulated runs, shared by the output tests
pytest_plugins = ["tests.helpers.outputs_fixtures"]


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not present")
    return SHARED
