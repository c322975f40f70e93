"""Paged KV block pool with prefix caching (vLLM v1 semantics), written plainly: one object
per block, a Python list for the free queue, a dict for the hash map, a list of blocks per
request. Quadratic where the engine is constant-time; obviously correct is the point.

Rules (vLLM v1's, as the engine states them):
- Blocks have ids 0..N-1 and start free, in id order. A block is either free (in the free
  queue, reference count 0) or held by one or more requests (count = number of holders).
- A block that holds a full block of a request's tokens is *cached*: it carries that
  block's hash and is listed in the hash map under it. Several blocks may carry the same
  hash (two requests computed the same block without hitting each other); a lookup returns
  the one cached first. A freed cached block stays cached until it is reused.
- Allocation takes blocks from the head of the free queue (least recently freed); reusing a
  cached block first drops its hash from the map (an eviction).
- Freeing a request walks its blocks last to first: cached blocks whose count drops to 0 go
  to the tail of the free queue in that order (so a request's tail is evicted before its
  prefix), uncached ones to the head, also in that order (reused first).
- A lookup finds the longest run of cached blocks matching a request's block hashes from
  block 0, full blocks only and at most (tokens - 1) // block_size of them, so the last
  token is always recomputed. Taking a hit ("touch") adds a reference to each hit block and
  takes the free ones off the free queue.
- A request's blocks are cached as they fill: after each scheduled chunk, every block that
  is full once the chunk is computed (and lies within the known sequence) gets its hash.

Block hashes: block k of a request has the k-th hash of its workload hash list, and past the
end of that list a hash private to the request (derived from its index and k, as the engine
derives it), so only the request itself can hit such a block (after a preemption).
"""

from vidur_fast.kernels.dtypes import NO_HASH

_M64 = (1 << 64) - 1
_M63 = (1 << 63) - 1
_MUL = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_PRIVATE_SALT = 0x3C6EF372FE94F82B


def _fmix64(z: int) -> int:
    """splitmix64 finalizer on Python ints (wrapping at 64 bits)."""
    z = ((z ^ (z >> 30)) * _MIX1) & _M64
    z = ((z ^ (z >> 27)) * _MIX2) & _M64
    return z ^ (z >> 31)


def private_hash(rid: int, k: int) -> int:
    """Hash of block k of request rid when its workload hash list is shorter than k + 1."""
    z = _fmix64((rid * _MUL + _PRIVATE_SALT) & _M64)
    z = _fmix64((z + k * _MUL) & _M64)
    h = z & _M63
    return 1 if h == NO_HASH else h


def block_hash(req, k: int) -> int:
    return req.hashes[k] if k < len(req.hashes) else private_hash(req.rid, k)


class Block:
    def __init__(self, block_id: int):
        self.id = block_id
        self.refs = 0
        self.hash: int | None = None  # set while the block is cached

    def __repr__(self) -> str:
        return f"Block({self.id}, refs={self.refs}, hash={self.hash})"


class FreeBlockQueue:
    """Free blocks, next to be reused first."""

    def __init__(self, blocks: list):
        self.blocks = list(blocks)

    def __len__(self) -> int:
        return len(self.blocks)

    def pop_head(self) -> Block:
        return self.blocks.pop(0)

    def remove(self, block: Block) -> None:
        self.blocks.remove(block)

    def append(self, block: Block) -> None:
        self.blocks.append(block)

    def prepend(self, block: Block) -> None:
        self.blocks.insert(0, block)


class BlockHashMap:
    """hash -> cached blocks carrying it, in the order they were cached."""

    def __init__(self):
        self.blocks: dict[int, list] = {}

    def first(self, h: int):
        found = self.blocks.get(h)
        return found[0] if found else None

    def insert(self, h: int, block: Block) -> None:
        self.blocks.setdefault(h, []).append(block)

    def remove(self, h: int, block: Block) -> None:
        found = self.blocks[h]
        found.remove(block)
        if not found:
            del self.blocks[h]


class RequestBlocks:
    """The blocks a request holds, in token order, and how many leading ones are cached."""

    def __init__(self):
        self.blocks: list = []
        self.num_cached = 0


class PrefixCachingBlockPool:
    """One replica's block pool, with the interface of CountedBlockPool plus the prefix-cache
    operations the vLLM v1 scheduler uses (lookup, admit, grow, cache_full_blocks)."""

    caching = True

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.all_blocks = [Block(b) for b in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.all_blocks)
        self.cached = BlockHashMap()
        self.requests: dict[int, RequestBlocks] = {}  # request id -> its blocks
        self.query_tokens = 0  # sequence tokens looked up at admission
        self.hit_tokens = 0  # of which found cached
        self.evictions = 0  # cached blocks reused for other tokens

    # ---- the counted-pool interface ----

    @property
    def free(self) -> int:
        """Blocks a request may take: free ones, cached-but-unreferenced included."""
        return len(self.free_queue)

    @property
    def allocated(self) -> int:
        return self.num_blocks - self.free

    @property
    def num_requests(self) -> int:
        return len(self.requests)

    def blocks_of(self, rid: int) -> int:
        held = self.requests.get(rid)
        return len(held.blocks) if held else 0

    def release(self, rid: int) -> None:
        held = self.requests.pop(rid, None)
        if held is None:
            return
        walk = list(reversed(held.blocks))
        uncached = []
        for block in walk:
            block.refs -= 1
            assert block.refs >= 0
            if block.refs == 0:
                if block.hash is not None:
                    self.free_queue.append(block)
                else:
                    uncached.append(block)
        for block in reversed(uncached):
            self.free_queue.prepend(block)

    # ---- prefix cache ----

    def lookup(self, req, n_tokens: int) -> tuple[int, int]:
        """(hit blocks, how many of them are free) for req's first n_tokens."""
        max_blocks = (n_tokens - 1) // self.block_size
        hit = 0
        free = 0
        while hit < max_blocks:
            block = self.cached.first(block_hash(req, hit))
            if block is None:
                break
            if block.refs == 0:
                free += 1
            hit += 1
        return hit, free

    def longest_cached_prefix(self, req) -> int:
        """Full prompt blocks of req cached here, from its workload hashes only and without
        the last-token cap (what the prefix-aware router estimates)."""
        n = min(len(req.hashes), req.prompt // self.block_size)
        k = 0
        while k < n and self.cached.first(req.hashes[k]) is not None:
            k += 1
        return k

    def _take_new(self, held: RequestBlocks, n: int) -> None:
        assert n <= self.free, "allocation beyond capacity"
        for _ in range(n):
            block = self.free_queue.pop_head()
            if block.hash is not None:
                self.cached.remove(block.hash, block)
                block.hash = None
                self.evictions += 1
            block.refs = 1
            held.blocks.append(block)

    def admit(self, req, hit_blocks: int, n_new: int) -> None:
        """req (holding nothing) takes its hit blocks, then n_new blocks from the free queue."""
        assert req.rid not in self.requests
        held = RequestBlocks()
        self.requests[req.rid] = held
        for k in range(hit_blocks):
            block = self.cached.first(block_hash(req, k))
            if block.refs == 0:
                self.free_queue.remove(block)
            block.refs += 1
            held.blocks.append(block)
        held.num_cached = hit_blocks
        self._take_new(held, n_new)
        self.query_tokens += req.seq_len
        self.hit_tokens += hit_blocks * self.block_size

    def grow(self, req, n_new: int) -> None:
        self._take_new(self.requests[req.rid], n_new)

    def cache_full_blocks(self, req, n_tokens: int) -> None:
        """Cache every block of req that is full once n_tokens of it are computed."""
        held = self.requests[req.rid]
        full = n_tokens // self.block_size
        for k in range(held.num_cached, full):
            block = held.blocks[k]
            assert block.hash is None
            block.hash = block_hash(req, k)
            self.cached.insert(block.hash, block)
        held.num_cached = max(held.num_cached, full)

    # ---- for comparisons with the engine ----

    def free_order(self) -> list[int]:
        return [b.id for b in self.free_queue.blocks]

    def block_hashes(self) -> list[int]:
        return [NO_HASH if b.hash is None else b.hash for b in self.all_blocks]

    def ref_counts(self) -> list[int]:
        return [b.refs for b in self.all_blocks]
