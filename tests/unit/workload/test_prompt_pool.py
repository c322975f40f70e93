"""Closed loop with a reused prompt pool: repeated prompts share prefix blocks and hit the cache."""

from dataclasses import replace

import numpy as np
import pytest

from vidur_fast.config.workload import ClosedLoopWorkload, FixedLengths, UniformLengths
from vidur_fast.errors import ConfigError
from vidur_fast.workload.closed_loop import build_closed_loop
from vidur_fast.workload.prompt_pool import pool_prompts


def test_pool_prompts_share_blocks_only_within_an_entry():
    prompt = np.array([40, 100, 70, 55, 90, 33])
    pick, new, off, h = pool_prompts(prompt, 3, seed=1, block_size=16)
    assert set(pick) <= {0, 1, 2}
    np.testing.assert_array_equal(new, prompt[:3][pick])  # entry k has the k-th length
    np.testing.assert_array_equal(np.diff(off), new // 16)
    lists = [tuple(h[off[i] : off[i + 1]]) for i in range(len(new))]
    for i in range(len(new)):
        for j in range(len(new)):
            assert (lists[i] == lists[j]) == (pick[i] == pick[j])
    assert h.min() >= 1 and len(set(x[0] for x in lists)) == len(set(pick))


def test_closed_loop_table_carries_pool_hashes():
    cfg = ClosedLoopWorkload(concurrency=4, num_requests=40, lengths=UniformLengths(200, 400))
    table, _ = build_closed_loop(cfg, 0)
    assert not table.has_hashes
    pooled, _ = build_closed_loop(replace(cfg, prompt_pool=5), 0, block_size=16)
    assert pooled.has_hashes and pooled.hash_block_size == 16
    assert len(set(pooled.prompt_tokens.tolist())) <= 5
    with pytest.raises(ConfigError, match="workload.prompt_pool"):
        build_closed_loop(replace(cfg, prompt_pool=-1), 0)
    with pytest.raises(ConfigError, match="max_tokens"):
        build_closed_loop(replace(cfg, prompt_pool=5, max_tokens=300), 0)


def test_repeated_prompts_hit_the_prefix_cache():
    from vidur_fast.api import simulate
    from vidur_fast.config.predictor import PredictorConfig
    from vidur_fast.config.sim import SimConfig

    fast = PredictorConfig(
        source="roofline", max_tokens=8192, max_prefill_chunk=4096, max_batch_size=64
    )
    wl = ClosedLoopWorkload(concurrency=4, num_requests=40, lengths=FixedLengths(1024, 8))
    base = SimConfig(workload=wl, predictor=fast, quiet=True)
    plain = simulate(base).summary["closed_loop"]["ttft"]["mean"]
    pooled = simulate(replace(base, workload=replace(wl, prompt_pool=2)))
    assert pooled.summary["closed_loop"]["ttft"]["mean"] < 0.5 * plain
