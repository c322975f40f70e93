"""One place for kernel dtypes, sentinels and policy codes.

Time is int64 nanoseconds everywhere inside kernels: equal-time tie-breaks stay exact and step
durations are rounded once, at lookup. Per-request token counts are int64 too (cheap, and
cumulative counters never overflow).
"""

from enum import IntEnum

import numpy as np

TIME_DT = np.int64
TOK_DT = np.int64
ID_DT = np.int32
FLOAT_DT = np.float64

NO_ID = -1
NEVER = np.iinfo(np.int64).max
NO_HASH = 0
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


class ReqStatus(IntEnum):
    """Ordered request states (test `status >= FINISHED`)."""

    PENDING = 0  # not yet arrived / routed
    WAITING = 1
    RUNNING = 2
    PREEMPTED = 3
    FINISHED = 4
    REJECTED = 5


class SchedPolicy(IntEnum):
    VLLM = 0
    SARATHI = 1
    ORCA = 2
    FASTER_TRANSFORMER = 3
    LIGHTLLM = 4
    VLLM_V1 = 5


class RouterPolicy(IntEnum):
    ROUND_ROBIN = 0
    RANDOM = 1
    LOR = 2
    LOP = 3
    STICKY = 4
    PREFIX_AWARE = 5
    LEAST_WAITING = 6
