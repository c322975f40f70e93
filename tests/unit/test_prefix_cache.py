"""Scripted checks of the paged block pool with prefix caching and of the cache-aware routers."""

import numpy as np
import pytest
from vidur_fast.kernels import prefix_cache as pc
from vidur_fast.kernels.codes import RouterPolicy, SchedPolicy
from vidur_fast.kernels.dtypes import NO_HASH, NO_ID
from vidur_fast.kernels.timing import TimingParams

from tests.scenario.engine_harness import GC, G, linear_grids, params
from vidur_fast.engine.run import run_engine
from vidur_fast.engine.state import alloc_reps, alloc_reqs


def _free_order(reps, r=0):
    out, b = [], int(reps.kv_fhead[r])
    while b != NO_ID:
        out.append(b)
        b = int(reps.kv_blk[r, b, pc._NEXT])
    return out


def _pool(n_blocks=8, hashes=((11, 12, 13),), prompt=(56,)):
    n = len(hashes)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(h) for h in hashes], out=off[1:])
    flat = np.array([x for h in hashes for x in h], dtype=np.int64)
    reqs = alloc_reqs(
        np.zeros(n, np.int64), np.array(prompt), np.full(n, 4), np.full(n, -1), off, flat
    )
    reps = alloc_reps(1, 1, 4, n_blocks, 8)
    return (
        reqs,
        reps,
        params(SchedPolicy.VLLM_V1, num_blocks=n_blocks)._replace(enable_prefix_caching=1),
    )


def test_free_puts_cached_blocks_at_tail_reversed_and_uncached_at_head():
    reqs, reps, p = _pool()
    assert pc.acquire_slot_nb(reps, reqs, 0, 0)
    pc.allocate_new_nb(reps, reqs, 0, 0, 4)  # blocks 0..3: 56 tokens = 3 full + 1 partial
    pc.cache_full_blocks_nb(reps, reqs, p, 0, 0, 56)
    assert list(reps.kv_hash[0, :4]) == [11, 12, 13, NO_HASH]
    assert _free_order(reps) == [4, 5, 6, 7]
    pc.free_request_blocks_nb(reps, reqs, 0, 0)
    # partial block first (reused first), then the old free blocks, then the tail-first prefix
    assert _free_order(reps) == [3, 4, 5, 6, 7, 2, 1, 0]
    assert reps.kv_nfree[0] == 8 and reqs.kv_slot[0] == NO_ID


def test_hit_is_capped_below_the_last_token_and_eviction_drops_the_hash():
    reqs, reps, p = _pool(hashes=((11, 12, 13), (11, 12, 13)), prompt=(48, 48))
    pc.acquire_slot_nb(reps, reqs, 0, 0)
    pc.allocate_new_nb(reps, reqs, 0, 0, 3)
    pc.cache_full_blocks_nb(reps, reqs, p, 0, 0, 48)
    # an identical 48-token prompt may hit at most (48 - 1) // 16 = 2 blocks
    assert pc.lookup_hit_nb(reps, reqs, p, 0, 1, 48) == (2, 0)
    pc.free_request_blocks_nb(reps, reqs, 0, 0)
    assert pc.lookup_hit_nb(reps, reqs, p, 0, 1, 48) == (2, 2)  # now both sit in the free list
    pc.acquire_slot_nb(reps, reqs, 0, 1)
    pc.allocate_new_nb(reps, reqs, 0, 1, 6)  # pops 3..7, then block 2 (hash 13): evicted
    assert reps.pc_evictions[0] == 1 and reps.kv_hash[0, 2] == NO_HASH
    assert pc.cached_block_nb(reps, 0, 13) == NO_ID and pc.cached_block_nb(reps, 0, 12) == 1


def test_private_blocks_enter_the_table_only_when_their_request_is_preempted():
    # one shared hash (11), then blocks past the hash list: private to request 0
    reqs, reps, p = _pool(n_blocks=8, hashes=((11,),), prompt=(56,))
    pc.acquire_slot_nb(reps, reqs, 0, 0)
    pc.allocate_new_nb(reps, reqs, 0, 0, 4)
    pc.cache_full_blocks_nb(reps, reqs, p, 0, 0, 56)
    private = [int(pc.block_hash_nb(reqs, 0, k)) for k in (1, 2)]
    assert list(reps.kv_hash[0, 1:3]) == private  # cached: freed to the LRU tail, evictable
    assert pc.cached_block_nb(reps, 0, 11) == 0
    assert [pc.cached_block_nb(reps, 0, h) for h in private] == [NO_ID, NO_ID]
    pc.index_private_blocks_nb(reps, reqs, 0, 0)
    assert [pc.cached_block_nb(reps, 0, h) for h in private] == [1, 2]
    pc.index_private_blocks_nb(reps, reqs, 0, 0)  # idempotent: no duplicate entries
    pc._evict_nb(reps, 0, 1)
    assert pc.cached_block_nb(reps, 0, private[0]) == NO_ID
    assert pc.cached_block_nb(reps, 0, private[1]) == 2


def test_evicting_an_unindexed_private_block_counts_and_clears_it():
    reqs, reps, p = _pool(n_blocks=8, hashes=((),), prompt=(56,))
    pc.acquire_slot_nb(reps, reqs, 0, 0)
    pc.allocate_new_nb(reps, reqs, 0, 0, 4)
    pc.cache_full_blocks_nb(reps, reqs, p, 0, 0, 56)
    pc._evict_nb(reps, 0, 0)
    assert reps.pc_evictions[0] == 1 and reps.kv_hash[0, 0] == NO_HASH
    assert reps.ht[0, :, pc._KEY].max() == 0  # nothing ever entered the table


def test_hash_table_matches_a_dict_under_random_inserts_and_evictions():
    rng = np.random.default_rng(0)
    n_blocks = 64
    reqs, reps, _ = _pool(n_blocks=n_blocks)
    model: dict[int, list[int]] = {}
    for _ in range(3000):
        b = int(rng.integers(n_blocks))
        if reps.kv_hash[0, b] != NO_HASH:
            h = int(reps.kv_hash[0, b])
            pc._evict_nb(reps, 0, b)
            model[h].remove(b)
            if not model[h]:
                del model[h]
        else:
            h = int(rng.integers(1, 40))  # few values: many duplicates and probe collisions
            pc._register_nb(reps, 0, b, h)
            model.setdefault(h, []).append(b)
        for h in range(1, 40):
            want = model[h][0] if h in model else NO_ID
            assert pc.cached_block_nb(reps, 0, h) == want


def _run(
    prompt,
    decode,
    arrival,
    hashes,
    session=None,
    router=RouterPolicy.ROUND_ROBIN,
    n_rep=1,
    num_blocks=200,
):
    n = len(prompt)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(h) for h in hashes], out=off[1:])
    flat = np.array([x for h in hashes for x in h], dtype=np.int64)
    sp = params(SchedPolicy.VLLM_V1, n_replicas=n_rep, router=router, num_blocks=num_blocks)
    sp = sp._replace(enable_prefix_caching=1, max_imbalance_tokens=10_000)
    return run_engine(
        np.asarray(arrival, dtype=np.float64),
        np.asarray(prompt),
        np.asarray(decode),
        np.asarray(session if session is not None else [-1] * n),
        off,
        np.zeros(n, dtype=np.uint8),
        linear_grids(),
        TimingParams(G, GC, 2, 0.0, 0.0, 0.0, 1, 1, 1),
        sp,
        np.zeros(n),
        hashes=flat,
    )


def test_engine_second_identical_prompt_hits_all_but_the_last_block():
    h = list(range(100, 164))  # 64 full blocks = 1024 tokens
    out = _run([1024, 1024], [2, 2], [0.0, 5.0], [h, h])
    assert list(out.reqs.cached_tokens) == [0, 1008]
    assert out.reps.pc_hit_tokens[0] == 1008


@pytest.mark.parametrize("router", [RouterPolicy.PREFIX_AWARE, RouterPolicy.STICKY])
def test_cache_aware_routers_follow_the_prefix(router):
    shared = list(range(1, 33))
    other = list(range(500, 532))
    prompts = [512, 512, 512, 512]
    hashes = [shared, other, shared, other]
    out = _run(
        prompts,
        [2] * 4,
        [0.0, 0.001, 5.0, 5.001],
        hashes,
        session=[7, 9, 7, 9],
        router=router,
        n_rep=2,
    )
    rep = list(out.reqs.replica)
    assert rep[0] != rep[1] and rep[2] == rep[0] and rep[3] == rep[1]
    if router == RouterPolicy.PREFIX_AWARE:
        assert list(out.reqs.cached_tokens) == [0, 0, 496, 496]


def test_random_shared_prefix_run_returns_every_block_and_slot():
    rng = np.random.default_rng(3)
    n = 300
    prompt = rng.integers(20, 600, n)
    decode = rng.integers(1, 80, n)
    # requests draw their prefix from 5 shared chains, then go private
    chains = [list(rng.integers(1, 2**62, 40)) for _ in range(5)]
    hashes = []
    for k in range(n):
        full = (prompt[k] + decode[k]) // 16
        shared = int(rng.integers(0, full + 1))
        c = chains[k % 5]
        hashes.append(
            [int(x) for x in c[: min(shared, 40)]]
            + [10**15 + k * 1000 + j for j in range(max(0, full - min(shared, 40)))]
        )
    arrival = np.cumsum(rng.exponential(0.01, n))
    out = _run(prompt, decode, arrival, hashes, n_rep=2, router=RouterPolicy.PREFIX_AWARE)
    reps = out.reps
    assert (out.reqs.status == 4).all()
    U = reps.kv_blk.shape[1]
    assert (reps.kv_nfree == U).all() and (reps.kv_blk[:, :, pc._REF] == 0).all()
    assert (reps.kv_slot_top == reps.kv_slot_stack.shape[1]).all()
    for r in range(2):
        assert sorted(_free_order(reps, r)) == list(range(U))
    assert (reps.alloc_blocks == 0).all() and reps.pc_hit_tokens.sum() > 0


def test_private_hashes_behave_like_unique_workload_hashes_under_preemption():
    """Blocks past the hash list enter the table only at preemption; a run without hashes must
    match, step for step, one whose workload gives every block a unique hash (always indexed)."""
    rng = np.random.default_rng(11)
    n = 120
    prompt = rng.integers(20, 400, n)
    decode = rng.integers(20, 200, n)
    arrival = np.cumsum(rng.exponential(0.002, n))
    unique = [
        [10**12 + k * 10_000 + j for j in range((prompt[k] + decode[k]) // 16)] for k in range(n)
    ]
    kw = dict(n_rep=2, num_blocks=90)
    lazy = _run(prompt, decode, arrival, [[] for _ in range(n)], **kw)
    eager = _run(prompt, decode, arrival, unique, **kw)
    assert lazy.reps.preemptions.sum() > 20 and lazy.reps.pc_hit_tokens.sum() > 0
    for col in ("first_tok_ns", "done_ns", "restarts", "cached_tokens", "replica"):
        np.testing.assert_array_equal(getattr(lazy.reqs, col), getattr(eager.reqs, col), col)
    for col in ("pc_hit_tokens", "pc_query_tokens", "pc_evictions", "preemptions", "kv_peak"):
        np.testing.assert_array_equal(getattr(lazy.reps, col), getattr(eager.reps, col), col)
