"""A load generator's reused prompt pool: requests draw their prompt from P distinct prompts.

Benchmark clients such as aiperf build a fixed set of prompts (aiperf: 100 dataset entries by
default) and reuse it for every request of the run. Two requests with the same prompt have the
same full prompt blocks, so an engine with prefix caching serves the later one from its cache.
Each pool prompt gets its own block ids (distinct prompts share no prefix); a request's length
is its prompt's length, the first P drawn lengths being the pool's.
"""

import numpy as np

from vidur_fast.workload.hashes import offsets_from_counts

# Random stream of the pool choice (after the closed loop's think-time stream).
POOL_STREAM = 4
# block id = (prompt index + 1) << BLOCK_BITS | (block index + 1): unique, non-zero, < 2^63
BLOCK_BITS = 32


def pool_prompts(
    prompt: np.ndarray, pool: int, seed: int, block_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pool index per request, prompt lengths, hash offsets, hashes) for `pool` prompts.

    Request i uses pool entry pick[i], drawn uniformly with replacement; its prompt length
    becomes that entry's length (entry k has the k-th drawn length). Hashes cover the full
    `block_size`-token blocks of each prompt."""
    n = prompt.size
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(POOL_STREAM,)))
    pick = rng.integers(0, pool, size=n)
    entry_len = np.asarray(prompt[: min(pool, n)], dtype=np.int64)
    if entry_len.size < pool:  # fewer requests than pool entries: the rest are never used
        entry_len = np.concatenate([entry_len, np.full(pool - entry_len.size, entry_len[-1])])
    new_prompt = entry_len[pick]
    counts = new_prompt // block_size
    offsets = offsets_from_counts(counts)
    req = np.repeat(np.arange(n), counts)
    blk = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[:-1][req]
    hashes = ((pick[req].astype(np.int64) + 1) << BLOCK_BITS) | (blk + 1)
    return pick, new_prompt, offsets, hashes
