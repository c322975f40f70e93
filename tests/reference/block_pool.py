"""KV block pools of the reference: counted blocks (Vidur's allocation map, vLLM v1 without
prefix caching) here; the paged pool with prefix caching is prefix_pool.PrefixCachingBlockPool.

A pool answers the schedulers: free blocks, blocks a request holds, allocate / free.
"""


class CountedBlockPool:
    """Counts blocks per request; no block ids, no cache."""

    caching = False

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.held: dict[int, int] = {}  # request id -> blocks (Vidur's allocation map)

    @property
    def allocated(self) -> int:
        return sum(self.held.values())

    @property
    def free(self) -> int:
        return self.num_blocks - self.allocated

    @property
    def num_requests(self) -> int:
        return len(self.held)

    def blocks_of(self, rid: int) -> int:
        return self.held.get(rid, 0)

    def allocate(self, rid: int, n: int) -> None:
        if n <= 0:
            return
        assert n <= self.free, "allocation beyond capacity"
        self.held[rid] = self.held.get(rid, 0) + n

    def release(self, rid: int) -> None:
        self.held.pop(rid, None)

    def longest_cached_prefix(self, req) -> int:
        """No cache: nothing cached (what the prefix-aware router sees)."""
        return 0
