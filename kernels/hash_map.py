"""Hash -> cached block map of each replica's KV pool, and the memo of the last prefix lookup.

NOTE(vllm): plays the part of BlockHashToBlockMap (vllm/v1/core/block_pool.py) for one
full-attention group. An open-addressing table (linear probing, backward-shift deletion) maps a
hash to the first block cached under it (KvPool.ht[r, c, :] = (hash, block), one 16-byte cell);
later blocks with the same hash hang off it in insertion order through the BLK_DUP field of
the block records (KvPool.blk[r, b, BLK_DUP]).

The memo (memo_*, mark) keeps the last lookup of the waiting head (req_blocks.lookup_hit_nb),
valid until one of its hit blocks is evicted or changes between free and referenced, or its
next chain hash is cached (a blocked head is looked up again every step).
"""

from numba import njit
from vidur_fast.kernels.codes import BLK_DUP, HT_EMPTY, HT_KEY, HT_VAL
from vidur_fast.kernels.dtypes import NO_ID

# ---- open-addressing table ----


@njit(cache=True, nogil=True, _nrt=False)
def _find_cell_nb(kv, r, h):
    """Cell of hash h in replica r's table.

    Mutates: nothing.
    Returns: cell index, or NO_ID when absent.
    """
    mask = kv.ht.shape[1] - 1
    c = h & mask
    while True:
        key = kv.ht[r, c, HT_KEY]
        if key == h:
            return c
        if key == HT_EMPTY:
            return NO_ID
        c = (c + 1) & mask


@njit(cache=True, nogil=True, _nrt=False)
def _insert_cell_nb(kv, r, h, b):
    """Map hash h (absent) to block b.

    Mutates: kv.ht.
    Returns: nothing.
    """
    mask = kv.ht.shape[1] - 1
    c = h & mask
    while kv.ht[r, c, HT_KEY] != HT_EMPTY:
        c = (c + 1) & mask
    kv.ht[r, c, HT_KEY] = h
    kv.ht[r, c, HT_VAL] = b


@njit(cache=True, nogil=True, _nrt=False)
def _delete_cell_nb(kv, r, c):
    """Delete cell c with backward-shift deletion (no tombstones, probes stay short).

    Mutates: kv.ht.
    Returns: nothing.
    """
    mask = kv.ht.shape[1] - 1
    hole = c
    j = (c + 1) & mask
    while kv.ht[r, j, HT_KEY] != HT_EMPTY:
        home = kv.ht[r, j, HT_KEY] & mask
        # move j into the hole unless its home lies cyclically in (hole, j]
        if (j - home) & mask >= (j - hole) & mask:
            kv.ht[r, hole, HT_KEY] = kv.ht[r, j, HT_KEY]
            kv.ht[r, hole, HT_VAL] = kv.ht[r, j, HT_VAL]
            hole = j
        j = (j + 1) & mask
    kv.ht[r, hole, HT_KEY] = HT_EMPTY
    kv.ht[r, hole, HT_VAL] = NO_ID


# ---- blocks by hash ----


@njit(cache=True, nogil=True, _nrt=False)
def cached_block_nb(kv, r, h):
    """A cached block holding hash h on replica r (the earliest cached).

    NOTE(vllm): BlockHashToBlockMap.get_one_block returns the first of duplicate blocks.
    Mutates: nothing.
    Returns: block id, or NO_ID.
    """
    c = _find_cell_nb(kv, r, h)
    if c == NO_ID:
        return NO_ID
    return kv.ht[r, c, HT_VAL]


@njit(cache=True, nogil=True, _nrt=False)
def insert_block_nb(kv, r, b, h):
    """Enter block b (holding hash h) into the map, after any block already there.

    NOTE(vllm): duplicates are kept (BlockHashToBlockMap.insert): two requests that computed
    the same block without hitting each other both cache it.
    Mutates: kv.blk (dup links), kv.ht, kv.memo_req.
    Returns: nothing.
    """
    kv.blk[r, b, BLK_DUP] = NO_ID
    if h == kv.memo_next_hash[r]:
        kv.memo_req[r] = NO_ID
    c = _find_cell_nb(kv, r, h)
    if c == NO_ID:
        _insert_cell_nb(kv, r, h, b)
        return
    x = kv.ht[r, c, HT_VAL]
    while kv.blk[r, x, BLK_DUP] != NO_ID:
        x = kv.blk[r, x, BLK_DUP]
    kv.blk[r, x, BLK_DUP] = b


@njit(cache=True, nogil=True, _nrt=False)
def remove_block_nb(kv, r, b, h):
    """Take block b (in the map under hash h) out of the map.

    NOTE(vllm): BlockHashToBlockMap.pop.
    Mutates: kv.blk (dup links), kv.ht.
    Returns: nothing.
    """
    c = _find_cell_nb(kv, r, h)
    head = kv.ht[r, c, HT_VAL]
    if head == b:
        if kv.blk[r, b, BLK_DUP] == NO_ID:
            _delete_cell_nb(kv, r, c)
        else:
            kv.ht[r, c, HT_VAL] = kv.blk[r, b, BLK_DUP]
    else:
        x = head
        while kv.blk[r, x, BLK_DUP] != b:
            x = kv.blk[r, x, BLK_DUP]
        kv.blk[r, x, BLK_DUP] = kv.blk[r, b, BLK_DUP]
    kv.blk[r, b, BLK_DUP] = NO_ID


# ---- lookup memo ----


@njit(cache=True, nogil=True, _nrt=False)
def memo_touch_nb(kv, r, b):
    """Drop the memoised head lookup if block b is one of its hit blocks.

    Mutates: kv.memo_req.
    Returns: nothing.
    """
    # no memo, nothing to drop (and no cache miss on mark)
    if kv.memo_req[r] != NO_ID and kv.mark[r, b] == kv.memo_stamp[r]:
        kv.memo_req[r] = NO_ID
