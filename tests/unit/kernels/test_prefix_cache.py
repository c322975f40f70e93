"""Scripted checks of the paged block pool with prefix caching and of the cache-aware routers."""

import numpy as np
import pytest
from vidur_fast.kernels import block_pool as bp
from vidur_fast.kernels import req_blocks as rb
from vidur_fast.kernels.codes import BLK_REF, HT_KEY, RouterPolicy, SchedPolicy
from vidur_fast.kernels.dtypes import NO_HASH, NO_ID
from vidur_fast.kernels.hash_map import cached_block_nb
from vidur_fast.kernels.timing import TimingParams

import vidur_fast.engine.run as engine_run
from tests.helpers.engine_harness import GC, G, linear_grids, params
from vidur_fast.engine.run import run_engine
from vidur_fast.engine.state import alloc_kv, alloc_reqs, free_queue_order


def _free_order(kv, r=0):
    return free_queue_order(kv, r)


def _pool(n_blocks=8, hashes=((11, 12, 13),), prompt=(56,)):
    n = len(hashes)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(h) for h in hashes], out=off[1:])
    flat = np.array([x for h in hashes for x in h], dtype=np.int64)
    reqs = alloc_reqs(
        np.zeros(n, np.int64), np.array(prompt), np.full(n, 4), np.full(n, -1), off, flat
    )
    kv = alloc_kv(1, n, 4, n_blocks, 8)
    return (
        reqs,
        kv,
        params(SchedPolicy.VLLM_V1, num_blocks=n_blocks)._replace(enable_prefix_caching=1),
    )


def test_free_puts_cached_blocks_at_tail_reversed_and_uncached_at_head():
    reqs, kv, p = _pool()
    assert rb.acquire_slot_nb(kv, reqs, 0, 0)
    rb.allocate_new_nb(kv, reqs, 0, 0, 4)  # blocks 0..3: 56 tokens = 3 full + 1 partial
    rb.cache_full_blocks_nb(kv, reqs, p, 0, 0, 56)
    assert list(kv.hash[0, :4]) == [11, 12, 13, NO_HASH]
    assert _free_order(kv) == [4, 5, 6, 7]
    rb.free_request_blocks_nb(kv, reqs, 0, 0)
    # partial block first (reused first), then the old free blocks, then the tail-first prefix
    assert _free_order(kv) == [3, 4, 5, 6, 7, 2, 1, 0]
    assert kv.nfree[0] == 8 and kv.req_slot[0] == NO_ID


def test_hit_is_capped_below_the_last_token_and_eviction_drops_the_hash():
    reqs, kv, p = _pool(hashes=((11, 12, 13), (11, 12, 13)), prompt=(48, 48))
    rb.acquire_slot_nb(kv, reqs, 0, 0)
    rb.allocate_new_nb(kv, reqs, 0, 0, 3)
    rb.cache_full_blocks_nb(kv, reqs, p, 0, 0, 48)
    # an identical 48-token prompt may hit at most (48 - 1) // 16 = 2 blocks
    assert rb.lookup_hit_nb(kv, reqs, p, 0, 1, 48) == (2, 0)
    rb.free_request_blocks_nb(kv, reqs, 0, 0)
    assert rb.lookup_hit_nb(kv, reqs, p, 0, 1, 48) == (2, 2)  # now both sit in the free list
    rb.acquire_slot_nb(kv, reqs, 0, 1)
    rb.allocate_new_nb(kv, reqs, 0, 1, 6)  # pops 3..7, then block 2 (hash 13): evicted
    assert kv.evictions[0] == 1 and kv.hash[0, 2] == NO_HASH
    assert cached_block_nb(kv, 0, 13) == NO_ID and cached_block_nb(kv, 0, 12) == 1


def test_private_blocks_enter_the_table_only_when_their_request_is_preempted():
    # one shared hash (11), then blocks past the hash list: private to request 0
    reqs, kv, p = _pool(n_blocks=8, hashes=((11,),), prompt=(56,))
    rb.acquire_slot_nb(kv, reqs, 0, 0)
    rb.allocate_new_nb(kv, reqs, 0, 0, 4)
    rb.cache_full_blocks_nb(kv, reqs, p, 0, 0, 56)
    private = [int(rb.block_hash_nb(reqs, 0, k)) for k in (1, 2)]
    # held by their request: counted as cached, their records left alone until it lets go
    assert kv.req_cached[0] == 3 and list(kv.hash[0, 1:3]) == [NO_HASH, NO_HASH]
    assert cached_block_nb(kv, 0, 11) == 0
    rb.index_private_blocks_nb(kv, reqs, 0, 0)  # a preemption marks and enters them
    assert list(kv.hash[0, 1:3]) == private
    assert [cached_block_nb(kv, 0, h) for h in private] == [1, 2]
    rb.index_private_blocks_nb(kv, reqs, 0, 0)  # idempotent: no duplicate entries
    bp.evict_cached_nb(kv, 0, 1)
    assert cached_block_nb(kv, 0, private[0]) == NO_ID
    assert cached_block_nb(kv, 0, private[1]) == 2


def test_freed_private_blocks_go_to_the_tail_marked_and_their_eviction_counts():
    reqs, kv, p = _pool(n_blocks=8, hashes=((),), prompt=(56,))
    rb.acquire_slot_nb(kv, reqs, 0, 0)
    rb.allocate_new_nb(kv, reqs, 0, 0, 4)
    rb.cache_full_blocks_nb(kv, reqs, p, 0, 0, 56)
    assert list(kv.hash[0, :4]) == [NO_HASH] * 4  # held: nothing written per block
    rb.free_request_blocks_nb(kv, reqs, 0, 0)
    private = [int(rb.block_hash_nb(reqs, 0, k)) for k in range(3)]
    assert list(kv.hash[0, :4]) == private + [NO_HASH]  # the partial block stays uncached
    assert _free_order(kv) == [3, 4, 5, 6, 7, 2, 1, 0]  # as blocks cached under shared hashes
    bp.evict_cached_nb(kv, 0, 0)
    assert kv.evictions[0] == 1 and kv.hash[0, 0] == NO_HASH
    assert kv.ht[0, :, HT_KEY].max() == 0  # nothing ever entered the table


def test_hash_table_matches_a_dict_under_random_inserts_and_evictions():
    rng = np.random.default_rng(0)
    n_blocks = 64
    reqs, kv, _ = _pool(n_blocks=n_blocks)
    model: dict[int, list[int]] = {}
    for _ in range(3000):
        b = int(rng.integers(n_blocks))
        if kv.hash[0, b] != NO_HASH:
            h = int(kv.hash[0, b])
            bp.evict_cached_nb(kv, 0, b)
            model[h].remove(b)
            if not model[h]:
                del model[h]
        else:
            h = int(rng.integers(1, 40))  # few values: many duplicates and probe collisions
            bp.cache_block_nb(kv, 0, b, h)
            model.setdefault(h, []).append(b)
        for h in range(1, 40):
            want = model[h][0] if h in model else NO_ID
            assert cached_block_nb(kv, 0, h) == want


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
    assert out.kv.hit_tokens[0] == 1008


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
    kv = out.kv
    assert (out.reqs.status == 4).all()
    U = kv.blk.shape[1]
    assert (kv.nfree == U).all() and (kv.blk[:, :, BLK_REF] == 0).all()
    assert (kv.slot_top == kv.slot_stack.shape[1]).all()
    for r in range(2):
        assert sorted(_free_order(kv, r)) == list(range(U))
    assert (out.reps.alloc_blocks == 0).all() and kv.hit_tokens.sum() > 0


def test_private_hashes_behave_like_unique_workload_hashes_under_preemption(monkeypatch):
    """Blocks past the hash list enter the table only at preemption; a run without hashes must
    match, step for step, one whose workload gives every block a unique hash (always indexed).
    The run without hashes lays its pools out from the start (else they are counts until a
    preemption, kernels/block_counts.py; tests/property/test_reference_diff.py)."""
    monkeypatch.setattr(engine_run, "COUNT_UNHASHED_POOLS", False)
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
    assert lazy.reps.preemptions.sum() > 20 and lazy.kv.hit_tokens.sum() > 0
    for col in ("first_tok_ns", "done_ns", "restarts", "cached_tokens", "replica", "sched_ns"):
        np.testing.assert_array_equal(getattr(lazy.reqs, col), getattr(eager.reqs, col), col)
    for col in ("exec_ns", "preempt_ns", "tbt_sum_ns", "tbt_max_ns"):
        np.testing.assert_array_equal(getattr(lazy.reqs, col), getattr(eager.reqs, col), col)
    for col in ("hit_tokens", "query_tokens", "evictions"):
        np.testing.assert_array_equal(getattr(lazy.kv, col), getattr(eager.kv, col), col)
    for col in ("preemptions", "kv_peak", "kv_area"):
        np.testing.assert_array_equal(getattr(lazy.reps, col), getattr(eager.reps, col), col)
    # the pools end block for block alike: the same free-queue order, every block cached
    for r in range(2):
        assert _free_order(lazy.kv, r) == _free_order(eager.kv, r)
    assert ((lazy.kv.hash != NO_HASH) == (eager.kv.hash != NO_HASH)).all()
