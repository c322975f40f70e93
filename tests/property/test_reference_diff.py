"""The kernel engine equals the plain-Python reference (tests/reference) exactly on small
random traces: per-request timestamps in ns, restarts, replicas, token gaps, and every batch
record; for vLLM v1 also with prefix caching (per-request hits, per-replica cache counters,
the final block pool) and async scheduling, on traces of multi-turn sessions that share
prefixes; and clusters of two pools that differ in KV blocks, stages and timing. Without
hashes in the workload each replica keeps its prefix-cache pool as counts until its first
preemption (kernels/block_counts.py): the engine still equals the reference, whose pool holds
every block, on every record and cache counter, and the same run with every pool laid out."""

import dataclasses

import numpy as np
import pytest
from vidur_fast.kernels.codes import (
    BLK_REF,
    KV_RULE_PER_REQUEST,
    KV_RULE_SUM,
    RouterPolicy,
    SchedPolicy,
)
from vidur_fast.kernels.dtypes import NEVER, NO_ID, NS_PER_S
from vidur_fast.kernels.pd import (
    CONTENTION_FAIR_SHARE,
    CONTENTION_NONE,
    DECIDE_ALWAYS,
    DECIDE_NEVER,
    DECIDE_UNCACHED_ABOVE,
    LINK_NET,
    LINK_NVLINK,
    ROLE_DECODE,
    ROLE_MIXED,
    ROLE_PREFILL,
    make_pd,
)
from vidur_fast.kernels.pools import stack_pools
from vidur_fast.kernels.router import route_groups
from vidur_fast.kernels.timing import TimingParams

import vidur_fast.engine.run as engine_run
from tests.helpers.engine_harness import sched_params
from tests.helpers.random_cases import (
    GC,
    PP_CAPABLE,
    ROUTERS,
    Case,
    G,
    random_case,
    rich_grids,
    whole_ms_grids,
)
from tests.reference.naive_sim import PD, naive_sim, place_nodes
from vidur_fast.engine.run import run_engine
from vidur_fast.engine.state import free_queue_order

CASES_PER_POLICY = 30
CASES_PER_V1_CONFIG = 60  # each of prefix caching off/on x async scheduling off/on


def session_trace(rng, block_size: int, whole_ms: bool) -> Case:
    """Multi-turn sessions: each turn's prompt is the previous turn's prompt and output plus
    new text, so its block hashes extend the previous turn's; some sessions open with a
    shared system prompt. Between them, standalone requests (some with the system prompt,
    some without any hashes). Hash lists cover the prompt's blocks (the partial last one
    included), sometimes fewer, so blocks past the list get the engine's private hashes, and
    sometimes the full blocks of prompt and output (a trace that knows the outputs: the next
    turn can hit them)."""

    def fresh(k):
        return [int(x) for x in rng.integers(1, 2**62, k)]

    system = fresh(int(rng.integers(1, 6)))
    rows = []  # (arrival s, session, prompt, decode, hash chain)

    def gap():
        if whole_ms:
            return int(rng.integers(0, 6)) * 1e-3
        return 0.0 if rng.random() < 0.2 else float(rng.exponential(4e-3))

    for s in range(int(rng.integers(1, 5))):
        t = gap() * int(rng.integers(0, 4))
        chain = system[: int(rng.integers(0, len(system) + 1))] if rng.random() < 0.6 else []
        prompt = len(chain) * block_size + int(rng.integers(1, 60))
        for _ in range(int(rng.integers(1, 5))):
            decode = int(rng.integers(1, 30))
            rows.append((t, s, prompt, decode, chain))
            t += gap() + (0.0 if whole_ms else 0.01 * rng.random())
            prompt += decode + int(rng.integers(1, 40))
    for _ in range(int(rng.integers(0, 8))):
        prompt = int(rng.integers(1, 200))
        kind = rng.random()
        chain = list(system) if kind < 0.4 else ([] if kind < 0.7 else None)
        if kind < 0.15:  # the system prompt alone, ending on a block boundary
            prompt = len(system) * block_size
        rows.append((gap() * int(rng.integers(0, 8)), -1, prompt, int(rng.integers(1, 40)), chain))
    rows.sort(key=lambda x: x[0])  # stable: turns of a session keep their order
    hashes = []
    for _, _, prompt, decode, chain in rows:
        if chain is None:
            hashes.append([])
            continue
        full, with_partial = prompt // block_size, -(-prompt // block_size)
        u = rng.random()
        if u < 0.3:
            n = (prompt + decode) // block_size
        elif u < 0.7:
            n = with_partial
        else:
            n = full if u < 0.85 else int(rng.integers(0, full + 1))
        chain.extend(fresh(max(0, n - len(chain))))  # the session's chain grows with its turns
        hashes.append(chain[:n])
    n = len(rows)
    return Case(
        [x[0] for x in rows],
        [x[2] for x in rows],
        [x[3] for x in rows],
        [-1 if x[1] < 0 else 7919 * x[1] + 5 for x in rows],  # sparse session ids
        hashes,
        rng.random(n),
    )


def random_v1_case(prefix_caching: bool, async_scheduling: bool, seed: int):
    """A vLLM v1 case on a session trace; about 40% with KV tight enough to preempt."""
    rng = np.random.default_rng([100 + 2 * prefix_caching + async_scheduling, seed])
    whole_ms = rng.random() < 0.3
    block_size = int(rng.choice([4, 8, 16]))
    case = session_trace(rng, block_size, whole_ms)
    total = case.prompt + case.decode
    need = int(np.max(-(-total // block_size)))
    tight = rng.random() < 0.4
    batch_cap = int(rng.choice([2, 3, 4, 8, 16]))
    chunk = int(rng.choice([8, 32, 64, 256]))
    sp = sched_params(
        policy=int(SchedPolicy.VLLM_V1),
        # the cache-aware routers drawn more often: the other routers ignore the cache
        router=int(rng.choice(ROUTERS + (RouterPolicy.STICKY, RouterPolicy.PREFIX_AWARE) * 2)),
        num_replicas=int(rng.integers(1, 4)),
        pp=1,
        block_size=block_size,
        usable_blocks=need + int(rng.integers(0, 4 if tight else 3 * need)),
        max_num_seqs=batch_cap,
        max_num_batched_tokens=chunk,
        long_prefill_token_threshold=int(rng.choice([0, 0, 16, 48])),
        reserve_full_sequence=int(rng.integers(0, 2)),
        max_num_partial_prefills=int(rng.choice([0, 0, 1, 2])),
        max_model_len=int(total.max()) + int(rng.integers(0, 3)) if rng.random() < 0.3 else 0,
        enable_prefix_caching=int(prefix_caching),
        max_imbalance_tokens=int(rng.choice([0, 40, 10_000])),
        async_scheduling=int(async_scheduling),
    )
    if whole_ms:
        grids = whole_ms_grids()
        cpu_ms, per_seq_ms = float(rng.choice([0.0, 1.0])), 0.0
    else:
        grids = rich_grids()
        cpu_ms, per_seq_ms = float(rng.choice([0.0, 0.2, 1.0])), float(rng.choice([0.0, 0.05]))
    kv_rule = KV_RULE_PER_REQUEST if rng.random() < 0.5 else KV_RULE_SUM
    tp = TimingParams(G, GC, 2, 0.1, 0.1, cpu_ms, kv_rule, 1, 1, per_seq_ms)
    return case.reject_some(rng, 0.05), sp, grids, tp


def run_case(case: Case, sp, grids, tp):
    n = len(case.arrival_s)
    hash_off = np.zeros(n + 1, dtype=np.int64)
    hash_off[1:] = np.cumsum([len(h) for h in case.hashes])
    flat = np.array([h for hs in case.hashes for h in hs], dtype=np.int64)
    out = run_engine(
        case.arrival_s,
        case.prompt,
        case.decode,
        case.session,
        hash_off,
        case.rejected,
        grids,
        tp,
        sp,
        case.u_route,
        hashes=flat,
    )
    arrival_ns = np.round(case.arrival_s * NS_PER_S).astype(np.int64)
    ref = naive_sim(
        arrival_ns,
        case.prompt,
        case.decode,
        sp,
        grids,
        tp,
        case.u_route,
        rejected=case.rejected,
        session=case.session,
        hashes=case.hashes,
    )
    return out, ref, sp


def run_both(policy, seed):
    case, sp, grids, tp = random_case(policy, seed)
    return run_case(case, sp, grids, tp)


def _ns(v):
    return NEVER if v is None else v


def assert_same(out, ref, sp, layout=True):
    """The engine's run equals the reference's; layout: also the final pool block by block
    (False: its cache counters only, for pools kept as counts)."""
    k = out.reqs
    got = {
        "sched_ns": k.sched_ns,
        "first_tok_ns": k.first_tok_ns,
        "done_ns": k.done_ns,
        "restarts": k.restarts,
        "replica": k.replica,
        "generated": k.generated,
        "exec_ns": k.exec_ns,
        "model_ns": k.model_ns,
        "preempt_ns": k.preempt_ns,
        "tbt_n": k.tbt_n,
        "tbt_sum_ns": k.tbt_sum_ns,
        "tbt_max_ns": k.tbt_max_ns,
    }
    if sp.policy == SchedPolicy.VLLM_V1:
        got["cached_tokens"] = k.cached_tokens
    for name, col in got.items():
        want = [_ns(getattr(q, name)) for q in ref.requests]
        if name == "cached_tokens":
            want = [q.cached_tokens or 0 for q in ref.requests]
        np.testing.assert_array_equal(col, want, err_msg=f"{name} ({sp})")
    b = out.batches
    assert len(b) == len(ref.batches), f"batch count {len(b)} != {len(ref.batches)} ({sp})"
    for col in (
        "start_ns",
        "end_ns",
        "replica",
        "batch_size",
        "num_tokens",
        "num_prefill_tokens",
        "stage_ns",
        "alloc_blocks",
        "waiting_requests",
        "preemptions",
        "num_cached_tokens",
    ):
        want = [getattr(x, col) for x in ref.batches]
        np.testing.assert_array_equal(b[col].to_numpy(), want, err_msg=f"batch {col} ({sp})")
    np.testing.assert_array_equal(out.reps.preemptions, ref.preemptions)
    np.testing.assert_array_equal(out.reps.busy_ns, ref.busy_ns, err_msg=f"busy_ns ({sp})")
    if sp.enable_prefix_caching:
        assert_same_pools(out.kv, ref.pools, sp, layout)


def engine_pool(kv, r):
    """Replica r's pool at the end of a run: the free queue from its head, each block's hash
    (NO_HASH: not cached) and reference count."""
    order = free_queue_order(kv, r)
    return order, kv.hash[r].tolist(), kv.blk[r, :, BLK_REF].tolist()


def assert_same_pools(kv, pools, sp, layout=True):
    for name, want in (
        ("query_tokens", [x.query_tokens for x in pools]),
        ("hit_tokens", [x.hit_tokens for x in pools]),
        ("evictions", [x.evictions for x in pools]),
    ):
        np.testing.assert_array_equal(getattr(kv, name), want, err_msg=f"{name} ({sp})")
    for r, pool in enumerate(pools if layout else ()):
        order, hashes, refs = engine_pool(kv, r)
        assert order == pool.free_order(), f"replica {r}: free queue order ({sp})"
        assert hashes == pool.block_hashes(), f"replica {r}: cached block hashes ({sp})"
        assert refs == pool.ref_counts(), f"replica {r}: reference counts ({sp})"


@pytest.mark.parametrize("seed", range(CASES_PER_POLICY))
@pytest.mark.parametrize(
    "policy",
    [
        SchedPolicy.SARATHI,
        SchedPolicy.VLLM,
        SchedPolicy.ORCA,
        SchedPolicy.FASTER_TRANSFORMER,
        SchedPolicy.LIGHTLLM,
        SchedPolicy.VLLM_V1,
    ],
    ids=lambda p: p.name.lower(),
)
def test_engine_equals_reference(policy, seed):
    out, ref, sp = run_both(policy, seed)
    assert all(q.done_ns is not None for q in ref.requests if not q.rejected)
    assert_same(out, ref, sp)


@pytest.mark.parametrize("policy", [SchedPolicy.SARATHI, SchedPolicy.VLLM, SchedPolicy.VLLM_V1])
def test_tight_kv_cases_do_preempt(policy):
    """The random cases exercise preemption (else the comparison would not cover restarts)."""
    restarts = sum(int(run_both(policy, s)[0].reqs.restarts.sum()) for s in range(10))
    assert restarts > 0


DP_LB_CASES = 10


def _dp_lb_case(policy, seed):
    """A random case routed by dp_lb on 2-3 replicas, its arrivals on whole ms: 2-4 bursts
    within 0.5 s, each trailing off over ~50 ms (the random cases' own span is mostly within
    the first 100 ms tick), so that queues form and drain across publications."""
    if policy == SchedPolicy.VLLM_V1:
        case, sp, grids, tp = random_v1_case(seed % 2 == 1, seed % 4 >= 2, seed)
    else:
        case, sp, grids, tp = random_case(policy, seed)
    rng = np.random.default_rng([13, int(policy), seed])
    n = len(case.arrival_s)
    bursts = rng.uniform(0.0, 0.5, int(rng.integers(2, 5)))
    arrival = rng.choice(bursts, n) + rng.exponential(0.05, n)
    case.arrival_s = np.sort(np.round(arrival, 3))
    sp = sp._replace(router=int(RouterPolicy.DP_LB), num_replicas=int(rng.integers(2, 4)))
    return case, sp, grids, tp


@pytest.mark.parametrize("seed", range(DP_LB_CASES))
@pytest.mark.parametrize("policy", list(SchedPolicy), ids=lambda p: p.name.lower())
def test_dp_lb_over_several_publications_equals_reference(policy, seed):
    """vLLM's DP front end with counts published several times while queues come and go."""
    out, ref, sp = run_case(*_dp_lb_case(policy, seed))
    assert all(q.done_ns is not None for q in ref.requests if not q.rejected)
    assert_same(out, ref, sp)


def test_dp_lb_cases_queue_and_pick_against_the_live_counts():
    """The dp_lb cases exercise what they claim: requests wait in the queues, and some picks
    differ from a pick on the live counts (the front end's counts are stale)."""
    waited = differ = 0
    for policy in SchedPolicy:
        for seed in range(DP_LB_CASES):
            case, sp, grids, tp = _dp_lb_case(policy, seed)
            out = run_case(case, sp, grids, tp)[0]
            waited += int((out.reqs.sched_ns > np.round(case.arrival_s * NS_PER_S)).sum())
            lor = run_case(case, sp._replace(router=int(RouterPolicy.LOR)), grids, tp)[0]
            differ += int((out.reqs.replica != lor.reqs.replica).any())
    assert waited > 0 and differ > 0


V1_CONFIGS = [(False, False), (True, False), (False, True), (True, True)]


def _v1_id(config):
    caching, async_on = config
    return f"{'cache' if caching else 'nocache'}-{'async' if async_on else 'sync'}"


@pytest.mark.parametrize("seed", range(CASES_PER_V1_CONFIG))
@pytest.mark.parametrize("config", V1_CONFIGS, ids=_v1_id)
def test_v1_sessions_equal_reference(config, seed):
    out, ref, sp = run_case(*random_v1_case(*config, seed))
    assert all(q.done_ns is not None for q in ref.requests if not q.rejected)
    assert_same(out, ref, sp)


def test_v1_session_cases_cover_the_cache():
    """The session cases hit the cache, evict, preempt and route with every router (else the
    comparison would not cover them)."""
    hits = evictions = restarts = readmit_hits = 0
    routers = set()
    for seed in range(CASES_PER_V1_CONFIG):
        for config in V1_CONFIGS:
            case, sp, grids, tp = random_v1_case(*config, seed)
            out, _, _ = run_case(case, sp, grids, tp)
            if sp.num_replicas > 1:
                routers.add(sp.router)
            restarts += int(out.reqs.restarts.sum())
            if sp.enable_prefix_caching:
                hits += int(out.kv.hit_tokens.sum())
                evictions += int(out.kv.evictions.sum())
                # hits of re-admissions after a preemption (cached_tokens: first admission)
                readmit_hits += int(out.kv.hit_tokens.sum() - out.reqs.cached_tokens.sum())
    assert hits > 0 and evictions > 0 and restarts > 0 and readmit_hits > 0
    assert routers == set(int(r) for r in RouterPolicy)


# ---- pools kept as counts: the session cases without their hashes ----

COUNTED_CASES = 40


def _unhashed_case(async_scheduling: bool, seed: int):
    case, sp, grids, tp = random_v1_case(True, async_scheduling, seed)
    case.hashes = [[] for _ in case.hashes]
    return case, sp, grids, tp


@pytest.mark.parametrize("seed", range(COUNTED_CASES))
@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_counted_pools_equal_reference(async_scheduling, seed):
    out, ref, sp = run_case(*_unhashed_case(async_scheduling, seed))
    assert all(q.done_ns is not None for q in ref.requests if not q.rejected)
    assert_same(out, ref, sp, layout=False)


def _laid_out_run(monkeypatch, case):
    monkeypatch.setattr(engine_run, "COUNT_UNHASHED_POOLS", False)
    try:
        return run_case(*case)[0]
    finally:
        monkeypatch.setattr(engine_run, "COUNT_UNHASHED_POOLS", True)


@pytest.mark.parametrize("seed", range(0, COUNTED_CASES, 4))
def test_counted_pools_equal_laid_out_pools(monkeypatch, seed):
    case = _unhashed_case(True, seed)
    counted = run_case(*case)[0]
    laid_out = _laid_out_run(monkeypatch, case)
    assert laid_out.kv.counted.sum() == 0
    for name in ("sched_ns", "first_tok_ns", "done_ns", "restarts", "preempt_ns", "tbt_sum_ns"):
        np.testing.assert_array_equal(getattr(counted.reqs, name), getattr(laid_out.reqs, name))
    for name in ("query_tokens", "hit_tokens", "evictions", "nfree"):
        np.testing.assert_array_equal(getattr(counted.kv, name), getattr(laid_out.kv, name))
    for r in np.flatnonzero(counted.kv.counted == 0):
        # a replica laid out at its first preemption: the same reference counts per hash
        # state (the block ids differ: they are given in a different order)
        refs_c = np.sort(counted.kv.blk[r, :, BLK_REF])
        refs_l = np.sort(laid_out.kv.blk[r, :, BLK_REF])
        np.testing.assert_array_equal(refs_c, refs_l)


def test_counted_cases_cover_preemption_and_eviction():
    """Some cases lay a replica out (a preemption) and re-admit with hits on its own blocks,
    some stay counted throughout, and cached blocks are evicted (else the comparison would not
    cover them)."""
    laid_out = stayed = evictions = readmit_hits = 0
    for seed in range(COUNTED_CASES):
        for async_scheduling in (False, True):
            out, _, _ = run_case(*_unhashed_case(async_scheduling, seed))
            laid_out += int((out.kv.counted == 0).sum())
            stayed += int(out.kv.counted.sum())
            evictions += int(out.kv.evictions.sum())
            readmit_hits += int(out.kv.hit_tokens.sum())
    assert laid_out > 0 and stayed > 0 and evictions > 0 and readmit_hits > 0


# ---- clusters of two pools: the pools differ in KV blocks, pipeline stages, timing grids and
# timing parameters; the reference gets each replica's pool, the engine one PoolParams ----

POOL_CASES = 12


def other_pool(rng, sp, grids, tp):
    """A second pool: slower or faster grids, its own host overhead and kv rule, more KV
    blocks (every request still fits), another pipeline depth where the policy has one, and
    often its own batch limits."""
    scale = float(rng.choice([0.5, 1.7, 3.0]))
    g1 = grids._replace(
        tok_ms=grids.tok_ms * scale + 0.01,
        kv_save_ms=grids.kv_save_ms * scale,
        sendrecv_ms=grids.sendrecv_ms * scale,
        decode_ms=grids.decode_ms * scale,
        prefill_ms=grids.prefill_ms * scale,
    )
    pp = sp.pp
    if sp.policy in PP_CAPABLE and not sp.async_scheduling:
        pp = int(rng.choice([1, 2]))
    p1 = sp._replace(
        pp=pp,
        usable_blocks=sp.usable_blocks + int(rng.integers(0, 3 * sp.usable_blocks)),
        batch_size_cap_per_stage=max(1, sp.batch_size_cap // pp),
    )
    if rng.random() < 0.6:  # the pool's own batch limits (a pool's scheduler settings)
        p1 = p1._replace(
            chunk_size=int(rng.choice([8, 32, 64, 256])),
            max_num_seqs=int(rng.choice([2, 3, 4, 8, 16])),
            max_num_batched_tokens=int(rng.choice([8, 32, 64, 256])),
            long_prefill_token_threshold=int(rng.choice([0, 0, 16, 48])),
            max_num_partial_prefills=int(rng.choice([0, 0, 1, 2])),
        )
    kv_rule = KV_RULE_PER_REQUEST if rng.random() < 0.5 else KV_RULE_SUM
    t1 = tp._replace(
        layers_per_stage=2 // pp,
        pp=pp,
        kv_rule=kv_rule,
        cpu_overhead_ms=float(rng.choice([0.0, 0.4])),
    )
    return p1, g1, t1


def run_pools(case, sp, grids, tp, rng):
    p1, g1, t1 = other_pool(rng, sp, grids, tp)
    counts = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    rep_pool = np.repeat([0, 1], counts)
    per_pool = [(sp, grids, tp), (p1, g1, t1)]
    R = int(rep_pool.size)
    sp_all = sp._replace(
        num_replicas=R,
        pp=max(sp.pp, p1.pp),
        usable_blocks=max(sp.usable_blocks, p1.usable_blocks),
        max_num_seqs=max(sp.max_num_seqs, p1.max_num_seqs),
    )
    pools = stack_pools(rep_pool, [sp, p1], [tp, t1], [grids, g1])
    n = len(case.arrival_s)
    hash_off = np.zeros(n + 1, dtype=np.int64)
    hash_off[1:] = np.cumsum([len(h) for h in case.hashes])
    flat = np.array([h for hs in case.hashes for h in hs], dtype=np.int64)
    out = run_engine(
        case.arrival_s,
        case.prompt,
        case.decode,
        case.session,
        hash_off,
        case.rejected,
        grids,
        tp,
        sp_all,
        case.u_route,
        hashes=flat,
        pools=pools,
    )
    arrival_ns = np.round(case.arrival_s * NS_PER_S).astype(np.int64)
    ref = naive_sim(
        arrival_ns,
        case.prompt,
        case.decode,
        sp_all,
        grids,
        tp,
        case.u_route,
        rejected=case.rejected,
        session=case.session,
        hashes=case.hashes,
        replica_params=[per_pool[q] for q in rep_pool],
    )
    return out, ref, sp_all, [per_pool[q][0] for q in rep_pool]


def assert_same_on_pools(out, ref, sp_all, rep_params):
    assert all(q.done_ns is not None for q in ref.requests if not q.rejected)
    width = out.reps.busy_ns.shape[1]
    padded = [list(b) + [0] * (width - len(b)) for b in ref.busy_ns]
    assert_same(
        out, dataclasses.replace(ref, busy_ns=padded), sp_all._replace(enable_prefix_caching=0)
    )
    if not sp_all.enable_prefix_caching:
        return
    kv = out.kv
    for name in ("query_tokens", "hit_tokens", "evictions"):
        want = [getattr(x, name) for x in ref.pools]
        np.testing.assert_array_equal(getattr(kv, name), want, err_msg=name)
    for r, pool in enumerate(ref.pools):
        order, hashes, refs = engine_pool(kv, r)
        u = rep_params[r].usable_blocks
        assert order == pool.free_order(), f"replica {r}: free queue order"
        assert hashes[:u] == pool.block_hashes(), f"replica {r}: cached block hashes"
        assert refs[:u] == pool.ref_counts(), f"replica {r}: reference counts"


@pytest.mark.parametrize("seed", range(POOL_CASES))
@pytest.mark.parametrize(
    "policy",
    [SchedPolicy.SARATHI, SchedPolicy.VLLM, SchedPolicy.ORCA, SchedPolicy.LIGHTLLM],
    ids=lambda p: p.name.lower(),
)
def test_pools_equal_reference(policy, seed):
    case, sp, grids, tp = random_case(policy, seed)
    rng = np.random.default_rng([7, int(policy), seed])
    assert_same_on_pools(*run_pools(case, sp, grids, tp, rng))


@pytest.mark.parametrize("seed", range(POOL_CASES))
@pytest.mark.parametrize("config", V1_CONFIGS, ids=_v1_id)
def test_v1_pools_equal_reference(config, seed):
    case, sp, grids, tp = random_v1_case(*config, seed)
    rng = np.random.default_rng([8, *config, seed])
    assert_same_on_pools(*run_pools(case, sp, grids, tp, rng))


# ---- prefill/decode disaggregation: a prefill pool and a decode pool (in either order), the
# engine's PDState against the reference's PD flow ----


def run_pd(case, sp, grids, tp, rng, contention="none"):
    sp = sp._replace(router=int(rng.choice([RouterPolicy.LOR, RouterPolicy.ROUND_ROBIN])))
    p1, g1, t1 = other_pool(rng, sp, grids, tp)
    if rng.random() < 0.5:  # a decode pool tighter than the prefill pool: hand-offs queue
        p1 = p1._replace(usable_blocks=sp.usable_blocks)
    counts = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    roles = ["prefill", "decode"] if rng.random() < 0.7 else ["decode", "prefill"]
    per_pool = [(sp, grids, tp), (p1, g1, t1)]
    decider, threshold = "always", 0
    if rng.random() < 0.4:  # a mixed pool (pool 0's settings) and a decider that uses it
        roles.append("mixed")
        counts.append(int(rng.integers(1, 3)))
        per_pool.append((sp, grids, tp))
        decider = str(rng.choice(["never", "uncached_tokens_above"]))
        threshold = int(np.median(case.prompt)) if decider != "never" else 0
    rep_pool = np.repeat(np.arange(len(counts)), counts)
    sp_all = sp._replace(
        num_replicas=int(rep_pool.size),
        pp=max(sp.pp, p1.pp),
        usable_blocks=max(sp.usable_blocks, p1.usable_blocks),
        max_num_seqs=max(sp.max_num_seqs, p1.max_num_seqs),
    )
    pools = stack_pools(
        rep_pool, [x[0] for x in per_pool], [x[2] for x in per_pool], [x[1] for x in per_pool]
    )
    rep_roles = [roles[q] for q in rep_pool]
    tok = [float(rng.choice([1000.0, 131072.0, 7777.5])) for _ in per_pool]
    rep_tok = [tok[q] for q in rep_pool]
    bw, lat = float(rng.choice([50.0, 7.3])), float(rng.choice([0.0, 3.0, 12.5]))
    codes = [{"prefill": ROLE_PREFILL, "decode": ROLE_DECODE}.get(x, ROLE_MIXED) for x in rep_roles]
    decide = {"always": DECIDE_ALWAYS, "never": DECIDE_NEVER}.get(decider, DECIDE_UNCACHED_ABOVE)
    share = CONTENTION_FAIR_SHARE if contention == "fair_share" else CONTENTION_NONE
    # placement: per pool its replicas' GPUs on 8-GPU nodes of one of two types; packed (the
    # pairs of a node move over NVLink) or every replica on nodes of its own
    gpus = [int(rng.choice([1, 2, 4, 8, 16])) for _ in per_pool]
    types = [str(rng.choice(["a", "b"])) for _ in per_pool]
    node, _ = place_nodes(
        [gpus[q] for q in rep_pool],
        [8] * len(rep_pool),
        [types[q] for q in rep_pool],
        packed=bool(rng.random() < 0.8),
    )
    nv_bw, nv_lat = float(rng.choice([450.0, 3.1])), float(rng.choice([0.0, 2.0]))
    n = len(case.arrival_s)
    hash_off = np.zeros(n + 1, dtype=np.int64)
    hash_off[1:] = np.cumsum([len(h) for h in case.hashes])
    flat = np.array([h for hs in case.hashes for h in hs], dtype=np.int64)
    out = run_engine(
        case.arrival_s,
        case.prompt,
        case.decode,
        case.session,
        hash_off,
        case.rejected,
        grids,
        tp,
        sp_all,
        case.u_route,
        hashes=flat,
        pools=pools,
        pd_setup=lambda k: make_pd(
            codes,
            rep_tok,
            bw,
            lat,
            k,
            decide,
            threshold,
            share,
            node=node,
            intra_bandwidth_gbps=nv_bw,
            intra_latency_us=nv_lat,
        ),
    )
    held = out.disagg.src != NO_ID
    out.reqs.orig_decode[held] = out.disagg.real_decode[held]
    arrival_ns = np.round(case.arrival_s * NS_PER_S).astype(np.int64)
    ref = naive_sim(
        arrival_ns,
        case.prompt,
        case.decode,
        sp_all,
        grids,
        tp,
        case.u_route,
        rejected=case.rejected,
        session=case.session,
        hashes=case.hashes,
        replica_params=[per_pool[q] for q in rep_pool],
        pd=PD(
            rep_roles,
            rep_tok,
            bw,
            lat,
            decider,
            threshold,
            contention,
            node=node,
            intra_bandwidth_gbps=nv_bw,
            intra_latency_us=nv_lat,
        ),
    )
    return out, ref, sp_all, [per_pool[q][0] for q in rep_pool]


PD_CASES = 40
# vLLM v1 settings of the PD cases: (prefix caching, async scheduling)
PD_CONFIGS = V1_CONFIGS


@pytest.mark.parametrize("seed", range(PD_CASES))
@pytest.mark.parametrize("config", PD_CONFIGS, ids=_v1_id)
def test_v1_pd_equal_reference(config, seed):
    case, sp, grids, tp = random_v1_case(*config, seed)
    rng = np.random.default_rng([9, seed])
    out, ref, sp_all, rep_params = run_pd(case, sp, grids, tp, rng)
    assert_same_on_pools(out, ref, sp_all, rep_params)
    started = out.disagg.start_ns != NEVER
    assert started.sum() == sum(1 for q in ref.requests if getattr(q, "dst", None) is not None)


@pytest.mark.parametrize("config", PD_CONFIGS, ids=_v1_id)
def test_v1_pd_cases_queue_for_decode_kv(config):
    """Some of the differential cases make hand-offs wait for decode blocks; some serve
    requests on a mixed pool; some preempt; with prefix caching some transfers move fewer
    bytes than the prompt (decode-side hits) and some prefills hit the cache."""
    waited = mixed = preempted = short = hits = 0
    kinds = np.zeros(2, dtype=np.int64)  # transfers over the network, over NVLink
    for seed in range(PD_CASES):
        case, sp, grids, tp = random_v1_case(*config, seed)
        out, *_ = run_pd(case, sp, grids, tp, np.random.default_rng([9, seed]))
        x = out.disagg
        waited += int(x.waited.sum())
        mixed += int((x.src == NO_ID).sum())
        preempted += int(out.reps.preemptions.sum())
        moved = np.flatnonzero(x.start_ns != NEVER)
        kinds += np.bincount(x.kind[moved], minlength=2)
        short += int((x.hit[moved] > 0).sum())
        hits += int(out.reqs.cached_tokens[x.src != NO_ID].sum())
    assert waited > 0 and mixed > 0 and preempted > 0
    assert kinds[LINK_NET] > 0 and kinds[LINK_NVLINK] > 0
    if config[0]:
        assert short > 0 and hits > 0


@pytest.mark.parametrize("seed", range(PD_CASES))
@pytest.mark.parametrize("config", PD_CONFIGS, ids=_v1_id)
def test_v1_pd_fair_share_equal_reference(config, seed):
    """Fair-share links: the engine's processor sharing against the reference's."""
    case, sp, grids, tp = random_v1_case(*config, seed)
    rng = np.random.default_rng([9, seed])
    out, ref, sp_all, rep_params = run_pd(case, sp, grids, tp, rng, "fair_share")
    assert_same_on_pools(out, ref, sp_all, rep_params)
    started = out.disagg.start_ns != NEVER
    assert started.sum() == sum(1 for q in ref.requests if getattr(q, "dst", None) is not None)


def test_v1_pd_fair_share_cases_share_a_link():
    """Some fair-share cases have transfers that overlap on a link: they last longer than
    latency + bytes / bandwidth (none shorter, but for a nanosecond of rounding)."""
    longer = 0
    for seed in range(PD_CASES):
        case, sp, grids, tp = random_v1_case(False, False, seed)
        out, *_ = run_pd(case, sp, grids, tp, np.random.default_rng([9, seed]), "fair_share")
        x = out.disagg
        ok = np.flatnonzero(x.start_ns != NEVER)
        nbytes = (case.prompt[ok] - x.hit[ok] * sp.block_size) * x.tok_bytes[x.src[ok]]
        bw = np.where(x.kind[ok] == LINK_NVLINK, x.link[3], x.link[0])
        lat = np.where(x.kind[ok] == LINK_NVLINK, x.link[4], x.link[1])
        alone = np.array([round(t) + round(b / w) for b, w, t in zip(nbytes, bw, lat, strict=True)])
        dur = x.end_ns[ok] - x.start_ns[ok]
        assert (dur >= alone - 1).all()
        longer += int((dur > alone).sum())
    assert longer > 0


# ---- every router over prefill/decode and mixed pools, and routers per pool ----

ROUTER_CASES = 4


def _knobs(rng, policy) -> tuple:
    """A router's knobs (policy, tolerance factor, top_k, max_imbalance_tokens), drawn."""
    tol = float(rng.choice([0.5, 1.0, 2.0]))
    return (int(policy), tol, int(rng.choice([1, 2, 3])), int(rng.choice([0, 40, 16384])))


def _own_routers(rng, n_pools: int, share: float) -> list:
    """Per pool a router of its own (any policy) with probability share, else None."""
    return [
        _knobs(rng, rng.choice(ROUTERS)) if rng.random() < share else None for _ in range(n_pools)
    ]


def run_routed(case, sp, grids, tp, rng, policy, pd_roles):
    """Pools with roles pd_roles (the first pool's settings and another pool's, alternating),
    the cluster router `policy` (its knobs drawn) and, on some pools, routers of their own;
    the engine's route groups against the reference's. Without prefill/decode roles, the
    decider is never and the pools are mixed pools behind per-pool routers."""
    knobs = _knobs(rng, policy)
    sp = sp._replace(
        router=knobs[0],
        router_tolerance_factor=knobs[1],
        router_top_k=knobs[2],
        max_imbalance_tokens=knobs[3],
    )
    p1, g1, t1 = other_pool(rng, sp, grids, tp)
    per_pool = [(sp, grids, tp) if k % 2 == 0 else (p1, g1, t1) for k in range(len(pd_roles))]
    counts = [int(rng.integers(1, 4)) for _ in pd_roles]
    rep_pool = np.repeat(np.arange(len(counts)), counts)
    own = _own_routers(rng, len(counts), 0.6)
    sp_all = sp._replace(
        num_replicas=int(rep_pool.size),
        pp=max(sp.pp, p1.pp),
        usable_blocks=max(sp.usable_blocks, p1.usable_blocks),
        max_num_seqs=max(sp.max_num_seqs, p1.max_num_seqs),
    )
    pools = stack_pools(
        rep_pool, [x[0] for x in per_pool], [x[2] for x in per_pool], [x[1] for x in per_pool]
    )
    rep_roles = [pd_roles[q] for q in rep_pool]
    codes = [{"prefill": ROLE_PREFILL, "decode": ROLE_DECODE}.get(x, ROLE_MIXED) for x in rep_roles]
    disagg = "prefill" in pd_roles
    decider = "always"
    if not disagg:
        decider = "never"
    elif "mixed" in pd_roles:
        decider = "uncached_tokens_above"
    threshold = int(np.median(case.prompt)) if decider == "uncached_tokens_above" else 0
    decide = {"always": DECIDE_ALWAYS, "never": DECIDE_NEVER}.get(decider, DECIDE_UNCACHED_ABOVE)
    n = len(case.arrival_s)
    groups = route_groups(codes, rep_pool, knobs, own, n, int(rng.integers(1 << 30)))
    rep_tok = [float(rng.choice([1000.0, 131072.0])) for _ in rep_pool]
    bw, lat = float(rng.choice([50.0, 7.3])), float(rng.choice([0.0, 3.0]))
    hash_off = np.zeros(n + 1, dtype=np.int64)
    hash_off[1:] = np.cumsum([len(h) for h in case.hashes])
    flat = np.array([h for hs in case.hashes for h in hs], dtype=np.int64)
    out = run_engine(
        case.arrival_s,
        case.prompt,
        case.decode,
        case.session,
        hash_off,
        case.rejected,
        grids,
        tp,
        sp_all,
        case.u_route,
        hashes=flat,
        pools=pools,
        pd_setup=lambda k: make_pd(
            codes, rep_tok, bw, lat, k, decide, threshold, CONTENTION_NONE, routers=groups
        ),
    )
    held = out.disagg.src != NO_ID
    out.reqs.orig_decode[held] = out.disagg.real_decode[held]
    arrival_ns = np.round(case.arrival_s * NS_PER_S).astype(np.int64)
    ref = naive_sim(
        arrival_ns,
        case.prompt,
        case.decode,
        sp_all,
        grids,
        tp,
        case.u_route,
        rejected=case.rejected,
        session=case.session,
        hashes=case.hashes,
        replica_params=[per_pool[q] for q in rep_pool],
        pd=PD(
            rep_roles, rep_tok, bw, lat, decider, threshold, "none", list(rep_pool), own, groups.u
        ),
    )
    return out, ref, sp_all, [per_pool[q][0] for q in rep_pool]


def assert_loads_drained(out):
    """Every router's load is back to 0 once all requests completed (lop_batch_end's need
    not be: prompt tokens served from a cache or on a decode replica are never taken off)."""
    rt = out.disagg.rt
    for r in range(rt.top.shape[0]):
        if rt.policy[rt.top[r]] != RouterPolicy.LOP_BATCH_END:
            assert out.reps.pending[r] == 0, f"replica {r}: first-level load"
        if rt.sub[r] != NO_ID and rt.policy[rt.sub[r]] != RouterPolicy.LOP_BATCH_END:
            assert rt.pend2[r] == 0, f"replica {r}: its pool's router's load"
    assert (rt.hold == 0).all() and (rt.held == 0).all()


PD_LAYOUTS = [
    ["prefill", "decode"],
    ["prefill", "decode", "prefill", "decode"],
    ["decode", "prefill", "prefill", "mixed"],
    ["prefill", "decode", "decode", "mixed", "mixed"],
]


@pytest.mark.parametrize("seed", range(ROUTER_CASES))
@pytest.mark.parametrize("policy", ROUTERS, ids=lambda p: p.name.lower())
def test_v1_pd_every_router_equal_reference(policy, seed):
    """Prefill/decode pools (several of a role, a mixed pool beside them) x every cluster
    router, some pools with routers of their own; prefix caching and async scheduling on in
    some cases (the prefix-cache routers see each replica's cache)."""
    case, sp, grids, tp = random_v1_case(seed % 2 == 1, seed % 4 >= 2, seed)
    rng = np.random.default_rng([11, int(policy), seed])
    roles = PD_LAYOUTS[int(rng.integers(len(PD_LAYOUTS)))]
    out, *rest = run_routed(case, sp, grids, tp, rng, policy, roles)
    assert_same_on_pools(out, *rest)
    assert_loads_drained(out)


@pytest.mark.parametrize("seed", range(ROUTER_CASES))
@pytest.mark.parametrize("policy", ROUTERS, ids=lambda p: p.name.lower())
def test_v1_mixed_pools_with_own_routers_equal_reference(policy, seed):
    """Mixed pools behind the cluster router and per-pool routers, prefix caching on half the
    cases (the prefix-cache routers see the replicas' caches)."""
    case, sp, grids, tp = random_v1_case(seed % 2 == 1, seed % 4 == 3, seed)
    rng = np.random.default_rng([12, int(policy), seed])
    roles = ["mixed"] * int(rng.integers(2, 4))
    out, *rest = run_routed(case, sp, grids, tp, rng, policy, roles)
    assert_same_on_pools(out, *rest)
    assert_loads_drained(out)


def test_router_cases_use_two_levels_and_own_routers():
    """The router cases exercise what they claim: a second-level pick inside a pool, a role
    routed by its one pool's own router, and session pins."""
    second = single = pinned = 0
    for policy in ROUTERS:
        for seed in range(ROUTER_CASES):
            case, sp, grids, tp = random_v1_case(seed % 2 == 1, seed % 4 >= 2, seed)
            rng = np.random.default_rng([11, int(policy), seed])
            roles = PD_LAYOUTS[int(rng.integers(len(PD_LAYOUTS)))]
            out, *_ = run_routed(case, sp, grids, tp, rng, policy, roles)
            rt = out.disagg.rt
            second += int((rt.sub != NO_ID).any())
            single += int((rt.policy[rt.first[rt.first >= 0]] != policy).any())
            pinned += int((rt.sess != NO_ID).any())
    assert second > 0 and single > 0 and pinned > 0
