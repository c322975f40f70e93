"""Allocate the kernels' struct-of-arrays state for one run."""

import mmap

import numpy as np

from vidur_fast.kernels.block_pool import init_pool_nb
from vidur_fast.kernels.codes import N_LS, ReqStatus
from vidur_fast.kernels.dtypes import NEVER, NO_ID
from vidur_fast.kernels.event_tree import tree_size
from vidur_fast.kernels.lifecycle import HIST_MEMO_SLOTS
from vidur_fast.kernels.state import (
    H_BLOCKS,
    H_CACHED_TOKENS,
    H_DECODE,
    H_DONE_NS,
    H_EXEC_NS,
    H_FIRST_TOK_NS,
    H_GENERATED,
    H_LAST_STAGE_END_NS,
    H_LAST_TOK_NS,
    H_MODEL_NS,
    H_ORIG_DECODE,
    H_PLACEHOLDERS,
    H_PREEMPT_NS,
    H_PROCESSED,
    H_PROMPT,
    H_RESTARTS,
    H_SCHED_NS,
    H_TBT_MAX_NS,
    H_TBT_N,
    H_TBT_SUM_NS,
    H_TOK_INFLIGHT,
    H_TOK_STALE,
    H_TOTAL,
    HOT_PREFILL_DONE_BYTE,
    HOT_STATUS_BYTE,
    HOT_WIDTH,
    BatchLog,
    KvPool,
    Reps,
    Reqs,
    RunState,
)

HIST_BUCKETS = 2400  # 1 us .. ~20 min at 1% relative width


def kernel_array(x: np.ndarray, dtype) -> np.ndarray:
    """x as a writeable C-contiguous array of dtype (copied only when it is not one already),
    so every run hands the kernels the same array types and reuses one compiled version."""
    x = np.asarray(x)
    if x.dtype == dtype and x.flags.c_contiguous and x.flags.writeable:
        return x
    return np.array(x, dtype=dtype, order="C")


def sparse_zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """A zeroed C-contiguous array whose memory is mapped one small page at a time as it is
    first written, for the pool's arrays a run writes only here and there: each replica's rows
    of block lists (max_num_seqs lists of the longest request's blocks, of which a replica
    fills a few) and of the hash map. numpy asks for huge pages (2 MiB) for big arrays, which
    a single write maps whole: on 1,000 replicas that made gigabytes resident for nothing."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if nbytes < 1 << 22:  # below numpy's huge-page threshold (4 MiB): np.zeros as it is
        return np.zeros(shape, dtype)
    buf = mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux
        buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def _read_only(x: np.ndarray) -> np.ndarray:
    """A read-only C-contiguous int64 view of x (copied only when it is not one): the hash list
    can be tens of millions of entries that kernels only read, and a workload may hand it
    over read-only or not; one array type keeps one compiled version of every kernel."""
    view = np.ascontiguousarray(x, dtype=np.int64).view()
    view.flags.writeable = False
    return view


# Reqs fields that are columns of the per-request record Reqs.hot (kernels/state.py, H_*).
_HOT_FIELDS = {
    "processed": H_PROCESSED,
    "tok_inflight": H_TOK_INFLIGHT,
    "prompt": H_PROMPT,
    "generated": H_GENERATED,
    "placeholders": H_PLACEHOLDERS,
    "blocks": H_BLOCKS,
    "orig_decode": H_ORIG_DECODE,
    "sched_ns": H_SCHED_NS,
    "last_stage_end_ns": H_LAST_STAGE_END_NS,
    "preempt_ns": H_PREEMPT_NS,
    "exec_ns": H_EXEC_NS,
    "model_ns": H_MODEL_NS,
    "first_tok_ns": H_FIRST_TOK_NS,
    "last_tok_ns": H_LAST_TOK_NS,
    "tbt_n": H_TBT_N,
    "tbt_sum_ns": H_TBT_SUM_NS,
    "tbt_max_ns": H_TBT_MAX_NS,
    "tok_stale": H_TOK_STALE,
    "decode": H_DECODE,
    "total": H_TOTAL,
    "restarts": H_RESTARTS,
    "cached_tokens": H_CACHED_TOKENS,
    "done_ns": H_DONE_NS,
}
_CACHE_LINE = 64


def _hot_records(n: int) -> np.ndarray:
    """A zeroed int64[n, HOT_WIDTH] whose first row starts at a cache-line boundary, so that
    each request's record spans exactly its three lines."""
    size = HOT_WIDTH * 8
    buf = np.zeros(n * size + _CACHE_LINE, dtype=np.uint8)
    skip = -buf.ctypes.data % _CACHE_LINE
    return buf[skip : skip + n * size].view(np.int64).reshape(n, HOT_WIDTH)


def alloc_reqs(
    arrival_ns: np.ndarray,
    prompt: np.ndarray,
    decode: np.ndarray,
    session: np.ndarray,
    hash_off: np.ndarray,
    hashes: np.ndarray | None = None,
    u_route: np.ndarray | None = None,
) -> Reqs:
    """Request state: the per-step fields as one record per request (Reqs.hot, the fields of
    _HOT_FIELDS strided views of its columns, status and prefill_done of its spare bytes), the
    others as columns."""
    n = arrival_ns.shape[0]
    i64 = np.int64

    def full(v):
        return np.full(n, v, dtype=i64)

    hot = _hot_records(n)
    cols = {name: hot[:, k] for name, k in _HOT_FIELDS.items()}
    cols["prompt"][:] = np.asarray(prompt, dtype=i64)
    cols["decode"][:] = np.asarray(decode, dtype=i64)
    cols["total"][:] = cols["prompt"] + cols["decode"]
    cols["orig_decode"][:] = cols["decode"]
    for name in ("sched_ns", "first_tok_ns", "done_ns"):
        cols[name][:] = NEVER
    status = hot.view(np.int8)[:, HOT_STATUS_BYTE]
    status[:] = ReqStatus.PENDING
    # Fresh writeable copies: a read-only input (e.g. a frozen RequestTable column) would be
    # typed `readonly array` and compile a second version of every kernel.
    return Reqs(
        arrival_ns=np.array(arrival_ns, dtype=i64),
        session=np.array(session, dtype=i64),
        hash_off=np.array(hash_off, dtype=i64),
        status=status,
        replica=np.full(n, NO_ID, dtype=np.int32),
        prefill_done=hot.view(np.uint8)[:, HOT_PREFILL_DONE_BYTE],
        q_next=full(NO_ID),
        group=full(NO_ID),
        rejected=np.zeros(n, dtype=np.uint8),
        hashes=_read_only(np.zeros(0, dtype=i64) if hashes is None else hashes),
        u_route=np.zeros(n) if u_route is None else kernel_array(u_route, np.float64),
        route_load=full(0),
        hot=hot,
        **cols,
    )


def alloc_reps(n_replicas: int, pp: int, batch_cap: int, batch_slots: int = 0) -> Reps:
    """Replica state; batch_cap: requests a replica may run at once (state.max_running);
    batch_slots: batches a replica may have in flight (0 = pp; vLLM v1 async scheduling
    needs 2)."""
    R = n_replicas
    slots = batch_slots or pp
    i64 = np.int64
    # batch slots hold up to batch_cap requests plus scratch space at the tail
    slot_cap = 2 * batch_cap + 2

    def z(*shape):
        return np.zeros(shape, dtype=i64)

    def never(*shape):
        return np.full(shape, NEVER, dtype=i64)

    return Reps(
        wq_head=np.full(R, NO_ID, dtype=i64),
        wq_tail=np.full(R, NO_ID, dtype=i64),
        wq_len=z(R),
        run=np.full((R, slot_cap), NO_ID, dtype=i64),
        run_n=z(R),
        alloc_blocks=z(R),
        alloc_reqs=z(R),
        inflight=z(R),
        bat_n=z(R, slots),
        bat_req=np.full((R, slots, slot_cap), NO_ID, dtype=i64),
        bat_tok=z(R, slots, slot_cap),
        bat_end=never(R, slots),
        bat_seq=z(R, slots),
        bat_npre=z(R, slots),
        stage_free=z(R, pp),
        wake=never(R),
        ev_key=never(tree_size(R)),
        ev_node=z(max(tree_size(R), 2)),
        pending=z(R),
        busy_ns=z(R, pp),
        preemptions=z(R),
        n_batches=z(R),
        lightllm_wait=z(R),
        kv_area=np.zeros(R, dtype=np.float64),
        kv_last_ns=z(R),
        kv_peak=z(R),
    )


def alloc_kv(
    n_replicas: int,
    n_requests: int,
    slots: int = 0,
    pool_blocks: int = 0,
    max_req_blocks: int = 0,
    counted: bool = False,
) -> KvPool:
    """The paged block pool (prefix caching): pool_blocks blocks per replica and `slots` block
    lists of max_req_blocks entries each. pool_blocks = 0: no pool, every per-block, per-slot
    and per-request array empty (only the per-replica counters are allocated). counted: every
    replica starts as counts (kernels/block_counts.py; only for a run whose requests carry no
    hashes), its blocks laid out at its first preemption."""
    R = n_replicas
    U = pool_blocks
    if U <= 0:
        U = slots = max_req_blocks = n_requests = 0
    H = 1 << max(1, int(2 * U - 1).bit_length()) if U > 0 else 0  # >= 2U: load factor <= 1/2
    C = H  # free-block ring: >= 2U slots, so that compacting its holes frees at least half
    i32, i64 = np.int32, np.int64
    kv = KvPool(
        blk=np.zeros((R, U, 4), i32),
        hash=np.zeros((R, U), i64),
        fhead=np.zeros(R, i64),
        ftail=np.zeros(R, i64),
        nfree=np.zeros(R, i64),
        ht=sparse_zeros((R, H, 2), i64),
        mark=sparse_zeros((R, U), i64),
        memo_req=np.full(R, NO_ID, i64),
        memo_hit=np.zeros(R, i64),
        memo_evictable=np.zeros(R, i64),
        memo_next_hash=np.zeros(R, i64),
        memo_stamp=np.zeros(R, i64),
        lists=sparse_zeros((R, slots, max_req_blocks), i32),
        slot_stack=np.zeros((R, slots), i64),
        slot_top=np.zeros(R, i64),
        req_slot=np.full(n_requests, NO_ID, i64),
        req_cached=np.zeros(n_requests, i64),
        query_tokens=np.zeros(R, i64),
        hit_tokens=np.zeros(R, i64),
        evictions=np.zeros(R, i64),
        fring=np.zeros((R, C), i32),
        counted=np.full(R, 1 if counted and U > 0 else 0, i64),
        free_cached=np.zeros(R, i64),
    )
    if U > 0:
        init_pool_nb(kv)
    return kv


# the pool's per-block and per-slot arrays: most of a replica's memory, unused after the run
_POOL_BULK = ("blk", "hash", "ht", "mark", "lists", "slot_stack", "fring")


def free_queue_order(kv: KvPool, r: int) -> list[int]:
    """Replica r's free blocks from the head of its free-block queue (next to evict) on."""
    ring = kv.fring[r]
    pos = np.arange(int(kv.fhead[r]), int(kv.ftail[r])) & (ring.shape[0] - 1)
    blocks = ring[pos]
    return [int(b) for b in blocks[blocks != NO_ID]]


def without_pool(kv: KvPool) -> KvPool:
    """kv with the pool's bulk arrays replaced by empty ones (same dtypes and dimensions), once
    the run is over: per-replica counters stay. On 1,000 replicas the pool is most of the
    process's memory, which the metrics and writers then need."""
    empty = {k: np.zeros((0,) * getattr(kv, k).ndim, getattr(kv, k).dtype) for k in _POOL_BULK}
    return kv._replace(**empty)


def alloc_run_state() -> RunState:
    """Loop cursor and TBT histogram of a run (the routers' state is in PDState.rt)."""
    return RunState(loop=np.zeros(N_LS, dtype=np.int64), tbt_hist=alloc_hist())


def alloc_log(capacity: int) -> BatchLog:
    i64 = np.int64
    return BatchLog(
        n=np.zeros(1, dtype=i64),
        start_ns=np.zeros(capacity, dtype=i64),
        end_ns=np.zeros(capacity, dtype=i64),
        replica=np.zeros(capacity, dtype=i64),
        size=np.zeros(capacity, dtype=i64),
        n_tokens=np.zeros(capacity, dtype=i64),
        n_prefill_tokens=np.zeros(capacity, dtype=i64),
        n_decode_tokens=np.zeros(capacity, dtype=i64),
        stage_ns=np.zeros(capacity, dtype=i64),
        alloc_blocks=np.zeros(capacity, dtype=i64),
        waiting=np.zeros(capacity, dtype=i64),
        preempted=np.zeros(capacity, dtype=i64),
        n_cached_tokens=np.zeros(capacity, dtype=i64),
    )


def alloc_hist() -> np.ndarray:
    """The TBT histogram's buckets, then the kernel's memo of the last gap (none yet: -1)."""
    hist = np.zeros(HIST_BUCKETS + HIST_MEMO_SLOTS, dtype=np.int64)
    hist[HIST_BUCKETS] = -1
    return hist


def hist_counts(hist: np.ndarray) -> np.ndarray:
    """The buckets of a histogram from alloc_hist, without the kernel's memo."""
    return hist[:HIST_BUCKETS]
