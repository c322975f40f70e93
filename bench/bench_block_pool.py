"""The prefix-cache block pool alone, for requests without prefix hashes (synthetic workloads).

Each of 8 replicas (29,000 blocks each, about an H100's Llama-3-8B pool) keeps 64 requests
running: a request takes its 60 prompt blocks at once, then one block per 16 decode steps for
20 blocks, with the two caching calls of a step (scheduling and the sampled token), and frees
its blocks when done; the free-block ring cycles through the whole pool, as in a long run.
Prints the CPU seconds of three runs of the kernels (compiled first) and the evictions.

    python bench/bench_block_pool.py            # 60,000 steps
    python bench/bench_block_pool.py --steps 2000
"""

import argparse
import time
from typing import NamedTuple

import numpy as np
from numba import njit
from vidur_fast.kernels.req_blocks import (
    acquire_slot_nb,
    allocate_new_nb,
    cache_full_blocks_nb,
    free_request_blocks_nb,
)

from vidur_fast.engine.state import alloc_kv, alloc_reqs

REPLICAS, RUNNING, POOL_BLOCKS, BLOCK_SIZE = 8, 64, 29_000, 16
PROMPT_BLOCKS, DECODE_BLOCKS = 60, 20


class Params(NamedTuple):
    block_size: int


# not cached: Numba would not notice an edit of the pool kernels inlined into it
@njit(cache=False, nogil=True, _nrt=False)
def drive_nb(kv, reqs, p, steps, act, tok):
    """The running requests of every replica for `steps` steps.

    Mutates: kv, reqs.blocks, act, tok.
    Returns: requests started.
    """
    started = 0
    bs = p.block_size
    for _ in range(steps):
        for r in range(act.shape[0]):
            for j in range(act.shape[1]):
                i = act[r, j]
                if i < 0 or tok[i] >= (PROMPT_BLOCKS + DECODE_BLOCKS) * bs:
                    if i >= 0:
                        free_request_blocks_nb(kv, reqs, r, i)
                    i = started
                    started += 1
                    act[r, j] = i
                    acquire_slot_nb(kv, reqs, r, i)
                    allocate_new_nb(kv, reqs, r, i, PROMPT_BLOCKS)
                    tok[i] = PROMPT_BLOCKS * bs
                    cache_full_blocks_nb(kv, reqs, p, r, i, tok[i])
                    continue
                tok[i] += 1
                if (tok[i] - 1) // bs + 1 > reqs.blocks[i]:
                    allocate_new_nb(kv, reqs, r, i, 1)
                cache_full_blocks_nb(kv, reqs, p, r, i, tok[i])
                cache_full_blocks_nb(kv, reqs, p, r, i, tok[i] - 1)
    return started


def run(steps: int) -> tuple[float, int]:
    """CPU seconds of one run of `steps` steps on a fresh pool, and its evictions."""
    n = steps * REPLICAS * RUNNING // (DECODE_BLOCKS * BLOCK_SIZE) + REPLICAS * RUNNING + 10
    z = np.zeros(n, np.int64)
    prompt, decode = z + PROMPT_BLOCKS * BLOCK_SIZE, z + DECODE_BLOCKS * BLOCK_SIZE
    reqs = alloc_reqs(z, prompt, decode, z - 1, np.zeros(n + 1, np.int64))
    kv = alloc_kv(REPLICAS, n, RUNNING, POOL_BLOCKS, PROMPT_BLOCKS + DECODE_BLOCKS + 2)
    act = np.full((REPLICAS, RUNNING), -1, np.int64)
    tok = np.zeros(n, np.int64)
    c = time.process_time()
    drive_nb(kv, reqs, Params(BLOCK_SIZE), steps, act, tok)
    return time.process_time() - c, int(kv.evictions.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60_000)
    args = ap.parse_args()
    run(10)  # compile
    runs = [run(args.steps) for _ in range(3)]
    cpu = " ".join(f"{t:.3f}" for t, _ in runs)
    print(f"{args.steps:,} steps: {cpu} CPU-s, {runs[0][1]:,} evictions")


if __name__ == "__main__":
    main()
