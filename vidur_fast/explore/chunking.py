"""Split work into chunks for executor workers, keeping points that share timing grids
together so each worker process loads a grid set as few times as possible."""

import math
from collections.abc import Sequence
from typing import Any

from vidur_fast.config.sim import SimConfig

MAX_CHUNK = 16


def timing_group(cfg: SimConfig) -> tuple:
    """What a point's timing grids depend on (see api.simulate's timing cache key)."""
    c = cfg.cluster
    return (c.model, c.device, c.node or "", c.tp, c.pp, repr(cfg.predictor))


def chunk_size(n_items: int, workers: int) -> int:
    """About four chunks per worker (load balance), at most MAX_CHUNK items each."""
    return max(1, min(MAX_CHUNK, math.ceil(n_items / (4 * max(1, workers)))))


def make_chunks(items: Sequence[tuple[str, SimConfig]], workers: int) -> list[list[Any]]:
    """items (id, config) grouped by timing_group, then cut into chunks of chunk_size."""
    ordered = sorted(items, key=lambda it: timing_group(it[1]))
    size = chunk_size(len(ordered), workers)
    return [list(ordered[i : i + size]) for i in range(0, len(ordered), size)]
