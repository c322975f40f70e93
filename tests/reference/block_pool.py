"""KV block pools of the reference: counted blocks (Vidur's allocation map, vLLM v1 without
prefix caching).

A pool answers four questions for the schedulers: free blocks, blocks a request holds, how
many prompt tokens it can take from a prefix cache (`cached_prefix_tokens`), and allocate /
free. A prefix-caching pool with block ids and hashes can be added beside CountedBlockPool
with the same interface.
"""


class CountedBlockPool:
    """Counts blocks per request; no block ids, no cache."""

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

    def cached_prefix_tokens(self, req) -> int:
        """Prompt tokens already in the cache for req (no cache: none)."""
        return 0
