"""Struct-of-arrays state bundles the kernels mutate (definitions only; allocated in Python)."""

from typing import NamedTuple

import numpy as np
from vidur_fast.kernels.codes import SchedPolicy

# Columns of Reqs.hot, one record (three 64-byte cache lines) per request holding the fields a
# running request's step reads or writes; the Reqs fields of the same names are strided views
# of it (engine.state.alloc_reqs). Line 0: scheduling and output (slot 7 holds the one-byte
# status and prefill_done); line 1: a batch's accounting, first and last token; line 2: the
# rest of the gap statistics and fields a step reads only at a request's end.
H_PROCESSED = 0
H_TOK_INFLIGHT = 1
H_PROMPT = 2
H_GENERATED = 3
H_PLACEHOLDERS = 4
H_BLOCKS = 5
H_ORIG_DECODE = 6
H_SCHED_NS = 8
H_LAST_STAGE_END_NS = 9
H_PREEMPT_NS = 10
H_EXEC_NS = 11
H_MODEL_NS = 12
H_FIRST_TOK_NS = 13
H_LAST_TOK_NS = 14
H_TBT_N = 15
H_TBT_SUM_NS = 16
H_TBT_MAX_NS = 17
H_TOK_STALE = 18
H_DECODE = 19
H_TOTAL = 20
H_RESTARTS = 21
H_CACHED_TOKENS = 22
H_DONE_NS = 23
HOT_WIDTH = 24  # int64 slots per record
HOT_STATUS_BYTE = 8 * 7  # byte offsets of status and prefill_done in the record
HOT_PREFILL_DONE_BYTE = 8 * 7 + 1
# the Reqs fields that are strided views of hot (its H_* columns, status and prefill_done):
# the loop is compiled for them typed strided ('A') whatever the request count (loop.run_nb)
HOT_VIEWS = (
    "processed",
    "tok_inflight",
    "prompt",
    "generated",
    "placeholders",
    "blocks",
    "orig_decode",
    "status",
    "prefill_done",
    "sched_ns",
    "last_stage_end_ns",
    "preempt_ns",
    "exec_ns",
    "model_ns",
    "first_tok_ns",
    "last_tok_ns",
    "tbt_n",
    "tbt_sum_ns",
    "tbt_max_ns",
    "tok_stale",
    "decode",
    "total",
    "restarts",
    "cached_tokens",
    "done_ns",
)


class Reqs(NamedTuple):
    """Per-request columns; a request is a row index (sorted by arrival). The fields a step
    touches are also the columns of `hot` (H_* above): the step's kernels index hot, the rest
    read the fields, views of the same memory."""

    arrival_ns: np.ndarray  # int64
    prompt: np.ndarray  # int64, current prefill length (Vidur restarts may grow it)
    decode: np.ndarray  # int64, current decode length
    total: np.ndarray  # int64, prompt + decode as given (never changes)
    orig_decode: np.ndarray  # int64, decode tokens requested
    session: np.ndarray  # int64, -1 = none
    hash_off: np.ndarray  # int64[n+1], CSR offsets into the hash array
    processed: np.ndarray  # int64, Vidur: tokens processed (+1 bonus); v1: computed tokens
    generated: np.ndarray  # int64, output tokens emitted so far
    status: np.ndarray  # int8, ReqStatus
    replica: np.ndarray  # int32
    prefill_done: np.ndarray  # uint8
    blocks: np.ndarray  # int64, KV blocks held (either allocator)
    q_next: np.ndarray  # int64, waiting-queue link (NO_ID = end)
    group: np.ndarray  # int64, batch group (faster_transformer)
    sched_ns: np.ndarray  # int64, first scheduled (NEVER = not yet)
    first_tok_ns: np.ndarray  # int64, first prefill completion
    done_ns: np.ndarray  # int64, completion
    restarts: np.ndarray  # int64
    exec_ns: np.ndarray  # int64, sum of stage times
    model_ns: np.ndarray  # int64, sum of stage model times (without host overhead)
    preempt_ns: np.ndarray  # int64, gaps between consecutive stage executions
    last_stage_end_ns: np.ndarray  # int64, 0 = never executed
    last_tok_ns: np.ndarray  # int64, time the previous token was emitted
    tbt_n: np.ndarray  # int64, number of inter-token gaps
    tbt_sum_ns: np.ndarray  # int64
    tbt_max_ns: np.ndarray  # int64
    cached_tokens: np.ndarray  # int64, prefix-cache hit at first admission
    rejected: np.ndarray  # uint8, could never run (reason code)
    hashes: np.ndarray  # int64[m], chained prefix-block hashes (hash_off indexes into it)
    tok_inflight: np.ndarray  # int64, v1: tokens scheduled in batches whose outputs are not applied
    placeholders: np.ndarray  # int64, v1 async: sampled tokens in flight (output placeholders)
    tok_stale: np.ndarray  # int64, v1 async: in-flight tokens scheduled before a preemption
    u_route: np.ndarray  # float64, pre-drawn uniform in [0, 1) for the random router
    route_load: np.ndarray  # int64, what the router added to its replica's load at routing
    hot: np.ndarray  # int64[n, HOT_WIDTH], the per-step fields as one record per request


class Reps(NamedTuple):
    """Per-replica scheduler state, queues and in-flight batches."""

    wq_head: np.ndarray  # int64[R], waiting queue linked through Reqs.q_next
    wq_tail: np.ndarray  # int64[R]
    wq_len: np.ndarray  # int64[R]
    run: np.ndarray  # int64[R, cap], running (not in flight) requests, ordered
    run_n: np.ndarray  # int64[R]
    alloc_blocks: np.ndarray  # int64[R], blocks held by requests
    alloc_reqs: np.ndarray  # int64[R], requests holding blocks (Vidur's allocation map size)
    inflight: np.ndarray  # int64[R], batches in flight (<= PP)
    bat_n: np.ndarray  # int64[R, PP], requests in the batch in slot
    bat_req: np.ndarray  # int64[R, PP, cap]
    bat_tok: np.ndarray  # int64[R, PP, cap]
    bat_end: np.ndarray  # int64[R, PP], end of the last stage (NEVER = slot free)
    bat_seq: np.ndarray  # int64[R, PP], formation order (ties between equal ends)
    bat_npre: np.ndarray  # int64[R, PP], prefill tokens of the batch (for lop bookkeeping)
    stage_free: np.ndarray  # int64[R, PP], when each pipeline stage becomes free
    wake: np.ndarray  # int64[R], pending scheduling attempt (NEVER = none)
    ev_key: np.ndarray  # int64[P], next-event time per replica (kernels/event_tree.py)
    ev_node: np.ndarray  # int64[max(P, 2)], tournament winners over ev_key
    pending: np.ndarray  # int64[R], router load: lor requests or lop prefill tokens
    busy_ns: np.ndarray  # int64[R, PP], stage busy time
    preemptions: np.ndarray  # int64[R]
    n_batches: np.ndarray  # int64[R]
    lightllm_wait: np.ndarray  # int64[R], LightLLM waiting-iteration counter
    kv_area: np.ndarray  # float64[R], integral of allocated blocks over time (block*ns)
    kv_last_ns: np.ndarray  # int64[R], time of the last kv_area update
    kv_peak: np.ndarray  # int64[R]


class KvPool(NamedTuple):
    """Paged KV block pool with prefix caching, per replica (kernels/kv.py and the modules
    behind it). Without prefix caching the per-block, per-slot and per-request arrays are
    empty (nothing reads them); the per-replica counters are always there.
    """

    # block pool and free-block queue (kernels/block_pool.py)
    blk: np.ndarray  # int32[R, U, 4]: ref count, dup link, free-ring slot, (unused)
    hash: np.ndarray  # int64[R, U], the block's chained hash (NO_HASH: not cached)
    fhead: np.ndarray  # int64[R], ring position of the next block to evict (LRU)
    ftail: np.ndarray  # int64[R], ring position after the last free block
    nfree: np.ndarray  # int64[R]
    # hash -> block map and the memo of the last lookup (kernels/hash_map.py)
    ht: np.ndarray  # int64[R, H, 2]: (hash, block) cells, H a power of two
    mark: np.ndarray  # int64[R, U], memo stamp of the blocks in the memoised hit
    memo_req: np.ndarray  # int64[R], request whose hit is memoised (NO_ID = none)
    memo_hit: np.ndarray  # int64[R]
    memo_evictable: np.ndarray  # int64[R]
    memo_next_hash: np.ndarray  # int64[R], chain hash right after the hit (NO_HASH = none)
    memo_stamp: np.ndarray  # int64[R]
    # per-request block lists (kernels/req_blocks.py)
    lists: np.ndarray  # int32[R, S, M], block ids per list slot, in token order
    slot_stack: np.ndarray  # int64[R, S], free list slots
    slot_top: np.ndarray  # int64[R]
    req_slot: np.ndarray  # int64[n], list slot of request i (NO_ID = holds no blocks)
    req_cached: np.ndarray  # int64[n], leading blocks of request i registered in the cache
    # counters (always R long)
    query_tokens: np.ndarray  # int64[R], prompt tokens looked up at admission
    hit_tokens: np.ndarray  # int64[R], tokens found cached at admission
    evictions: np.ndarray  # int64[R], cached blocks reused for other tokens
    # the free-block queue as a ring of block ids (kernels/block_pool.py)
    fring: np.ndarray  # int32[R, C], C a power of two >= 2U; NO_ID = a hole
    # replicas kept as counts while none of their blocks can be hit (kernels/block_counts.py)
    counted: np.ndarray  # int64[R], 1 while replica r's pool is counted, not laid out
    free_cached: np.ndarray  # int64[R], free blocks of a counted replica that are cached


class RunState(NamedTuple):
    """Small per-run arrays carried across run_nb resumptions."""

    loop: np.ndarray  # int64[codes.N_LS], loop cursor (codes.LS_*)
    tbt_hist: np.ndarray  # int64[B], TBT log-bucket histogram (lifecycle.HIST_*)


class BatchLog(NamedTuple):
    """Preallocated per-batch records with a cursor in n[0]."""

    n: np.ndarray  # int64[1]
    start_ns: np.ndarray
    end_ns: np.ndarray
    replica: np.ndarray
    size: np.ndarray
    n_tokens: np.ndarray
    n_prefill_tokens: np.ndarray
    n_decode_tokens: np.ndarray
    stage_ns: np.ndarray  # duration of one (first) stage
    alloc_blocks: np.ndarray  # allocated blocks after formation
    waiting: np.ndarray  # waiting-queue length after formation
    preempted: np.ndarray  # preemptions during formation
    n_cached_tokens: np.ndarray  # prompt tokens found in the prefix cache by admitted requests


class SchedParams(NamedTuple):
    """Scheduler and router parameters. A field named as a config field holds that field's
    value; a derived value says what it is derived from. Fields a policy does not read are 0.
    """

    policy: int  # codes.SchedPolicy
    router: int  # codes.RouterPolicy
    num_replicas: int  # cluster.num_replicas
    pp: int  # cluster.pp
    block_size: int  # KV block size in tokens (LightLLM: 1, KV is accounted per token)
    usable_blocks: int  # KV blocks per replica requests may hold (vllm_v1: num_blocks - 1)
    watermark_blocks: int  # derived: watermark_blocks_fraction * blocks (vllm v0, Sarathi)
    batch_size_cap: int  # Vidur schedulers and LightLLM: requests holding blocks
    batch_size_cap_per_stage: int  # derived: batch_size_cap // pp, requests per micro-batch
    planned_batch_size: int  # derived: the memory planner's request slots, at most
    # batch_size_cap (Orca, FasterTransformer)
    chunk_size: int  # Sarathi: tokens per batch
    max_tokens_in_batch: int  # vllm v0, LightLLM
    max_blocks_per_seq: int  # derived: max_tokens // block_size, reserved per request (Orca,
    # FasterTransformer)
    max_waiting_iters: int  # LightLLM
    max_num_seqs: int  # vllm_v1: running requests
    max_num_batched_tokens: int  # vllm_v1: token budget of a step
    long_prefill_token_threshold: int  # vllm_v1, 0 = off
    max_model_len: int  # vllm_v1 cap on tokens per request (config value or the model's)
    reserve_full_sequence: int  # vllm_v1 full-sequence admission gate
    max_num_partial_prefills: int = 0  # vllm_v1: requests in prefill per step (0 = no cap)
    enable_prefix_caching: int = 0  # vllm_v1: paged block pool with prefix caching
    max_imbalance_tokens: int = 0  # prefix_aware router: pending-prefill tokens above the
    # least loaded
    async_scheduling: int = 0  # vllm_v1: form step N+1 before step N's outputs are applied
    router_tolerance_factor: float = 2.0  # tolerant_sticky_lop_uncached: stay while the
    # session's replica's imbalance is within this factor of the smallest
    router_top_k: int = 2  # ranked_sticky_lop_uncached: stay while among the k best
    block_shift: int = -1  # derived: log2(block_size) when a power of two, else -1; tokens
    # to blocks by a shift then (a 64-bit division costs 40-90 cycles, twice per request-step)
    dp_group: int = 1  # predictor.attention_dp of a one-pool cluster: that many consecutive
    # replicas are the DP ranks of one engine and step in lockstep (1 = every replica alone)


def block_shift_of(block_size: int) -> int:
    """SchedParams.block_shift for a block size."""
    if block_size > 0 and block_size & (block_size - 1) == 0:
        return block_size.bit_length() - 1
    return -1


def max_running(p: SchedParams) -> int:
    """Requests a replica may run at once (sizes the running list and the batch slots)."""
    return p.max_num_seqs if p.policy == SchedPolicy.VLLM_V1 else p.batch_size_cap
