"""Every integer code the kernels use: policies, request and run statuses, slot indices.

Policies and statuses are IntEnums (Numba reads their members as constants); the slot indices
name positions in small int64 arrays shared with the Python layer.
"""

from enum import IntEnum

# ---- policies ----


class SchedPolicy(IntEnum):
    """Replica scheduler (SchedParams.policy)."""

    VLLM = 0
    SARATHI = 1
    ORCA = 2
    FASTER_TRANSFORMER = 3
    LIGHTLLM = 4
    VLLM_V1 = 5


class RouterPolicy(IntEnum):
    """Global router (SchedParams.router)."""

    ROUND_ROBIN = 0
    RANDOM = 1
    LOR = 2
    LOP = 3
    STICKY = 4
    PREFIX_AWARE = 5
    LEAST_WAITING = 6
    LOP_BINARY = 7
    LOP_BATCH_END = 8
    LOP_UNCACHED = 9
    STICKY_ROUND_ROBIN = 10
    STICKY_LOR = 11
    TOLERANT_STICKY_LOP_UNCACHED = 12
    RANKED_STICKY_LOP_UNCACHED = 13
    DP_LB = 14


# ---- statuses ----


class ReqStatus(IntEnum):
    """Ordered request states (test `status >= FINISHED`)."""

    PENDING = 0  # not yet arrived / routed
    WAITING = 1
    RUNNING = 2
    PREEMPTED = 3
    FINISHED = 4


class RunStatus(IntEnum):
    """Why loop.run_nb returned."""

    DONE = 0  # every request finished
    LOG_FULL = 1  # the batch log is full: flush it and call again
    MAX_STEPS = 2  # the step budget of this call is spent: call again
    TIME_LIMIT = 3  # the next event lies past the time limit
    BROKEN = 4  # a broken invariant (a running list overflowed)


# ---- slot indices ----

# loop state (int64[N_LS] carried across run_nb resumptions)
LS_NEXT_REQ = 0  # next request to arrive (open loop)
LS_DONE = 1  # requests completed
LS_NOW = 2  # time of the last event handled
LS_STEPS = 3  # loop iterations run
N_LS = 4

# grid lookups clamped at an edge (TimingGrids.counters), per family
CLAMP_TOKENS = 0
CLAMP_DECODE_BATCH = 1
CLAMP_DECODE_KV = 2
CLAMP_PREFILL_KV = 3
CLAMP_PREFILL_CHUNK = 4
N_COUNTERS = 5

# prefill kv feature of a batch (TimingParams.kv_rule)
KV_RULE_PER_REQUEST = 0  # Vidur main: kv = sum(ceil_g(k_i))
KV_RULE_SUM = 1  # Vidur canary: kv = ceil_g(sum(k_i))

# fields of a block record (KvPool.blk[r, b, :]) and of a hash-map cell (KvPool.ht[r, c, :])
BLK_REF = 0  # references to the block (0 = free, possibly still cached)
BLK_DUP = 1  # next block cached under the same hash (NO_ID at the end, or BLK_UNINDEXED)
BLK_SLOT = 2  # slot of the block in its replica's free-block ring while free (NO_ID: in use)
# field 3 is unused: it pads the record to 16 bytes
BLK_UNINDEXED = -2  # BLK_DUP of a cached block whose private hash is not in the hash map
HT_KEY = 0  # hash (HT_EMPTY = empty cell)
HT_VAL = 1  # first block cached under it
HT_EMPTY = 0
