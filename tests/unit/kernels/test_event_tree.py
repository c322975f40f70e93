"""Tournament tree over replica event times vs a linear scan (lowest id wins ties)."""

import numpy as np
import pytest
from vidur_fast.kernels.dtypes import NEVER
from vidur_fast.kernels.event_tree import (
    tree_build_nb,
    tree_set_nb,
    tree_size,
    tree_top_nb,
)


def _scan(times: np.ndarray) -> tuple[int, int]:
    r = int(np.argmin(times))  # argmin returns the first (lowest id) minimum
    return r, int(times[r])


def _empty_tree(n: int) -> tuple[np.ndarray, np.ndarray]:
    p = tree_size(n)
    key = np.full(p, NEVER, dtype=np.int64)
    node = np.zeros(max(p, 2), dtype=np.int64)
    tree_build_nb(key, node)
    return key, node


def test_tree_size_is_next_power_of_two():
    assert [tree_size(n) for n in (1, 2, 3, 4, 5, 64, 1000)] == [1, 2, 4, 4, 8, 64, 1024]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000])
def test_random_updates_match_linear_scan(n):
    rng = np.random.default_rng(n)
    key, node = _empty_tree(n)
    times = np.full(n, NEVER, dtype=np.int64)
    assert tree_top_nb(key, node) == (0, NEVER)
    for _ in range(3000):
        r = int(rng.integers(n))
        # few distinct values so that ties are frequent; NEVER marks idle replicas
        t = NEVER if rng.random() < 0.2 else int(rng.integers(0, 5))
        times[r] = t
        tree_set_nb(key, node, r, t)
        assert tree_top_nb(key, node) == _scan(times)


def test_build_from_keys_matches_scan():
    rng = np.random.default_rng(1)
    key, node = _empty_tree(37)
    times = rng.integers(0, 3, size=37)
    key[:37] = times
    tree_build_nb(key, node)
    assert tree_top_nb(key, node) == _scan(times)
