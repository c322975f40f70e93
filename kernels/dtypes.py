"""One place for kernel dtypes and sentinels (integer codes live in codes.py).

Time is int64 nanoseconds everywhere inside kernels: equal-time tie-breaks stay exact and step
durations are rounded once, at lookup. Per-request token counts are int64 too (cheap, and
cumulative counters never overflow).
"""

import numpy as np

NO_ID = -1
NEVER = np.iinfo(np.int64).max
NO_HASH = 0
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
