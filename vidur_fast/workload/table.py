"""RequestTable: the workload as struct-of-arrays, sorted by arrival (stable)."""

from dataclasses import dataclass

import numpy as np

from vidur_fast.kernels.dtypes import NO_HASH, NO_ID
from vidur_fast.workload.hashes import gather_segments

_PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, eq=False)
class RequestTable:
    """One row per request, in arrival order. make_table() returns read-only arrays.

    Request i's prefix-block hashes are hashes[hash_offsets[i]:hash_offsets[i + 1]]: one per
    full block of hash_block_size tokens from the start of the prompt (the output too when the
    trace gives them), chained so equal hashes at block k mean equal tokens 0..k. Every full
    prompt block has one; values are in [1, 2^63 - 1] (NO_HASH = 0 never appears).
    """

    arrival_s: np.ndarray
    """float64[n] arrival time in seconds, non-decreasing."""
    prompt_tokens: np.ndarray
    """int64[n] prompt (prefill) tokens, >= 1."""
    decode_tokens: np.ndarray
    """int64[n] output (decode) tokens, >= 1 (the first comes out of the prefill step)."""
    session_id: np.ndarray
    """int64[n] conversation/session id, NO_ID (-1) when unknown."""
    hash_offsets: np.ndarray
    """int64[n+1] CSR offsets into hashes."""
    hashes: np.ndarray
    """int64[m] chained prefix-block hashes (empty when the workload has none)."""
    hash_block_size: int
    """Tokens per hashed block; 0 when there are no hashes."""
    source_row: np.ndarray
    """int64[n] 0-based data row in the input file (generation index for synthetic requests)."""
    source: str = ""
    """Input file path, or a short description of the generator."""

    def __post_init__(self) -> None:
        n = self.arrival_s.shape[0]
        for name, dtype, size in (
            ("arrival_s", np.float64, n),
            ("prompt_tokens", np.int64, n),
            ("decode_tokens", np.int64, n),
            ("session_id", np.int64, n),
            ("hash_offsets", np.int64, n + 1),
            ("hashes", np.int64, None),
            ("source_row", np.int64, n),
        ):
            arr = getattr(self, name)
            if arr.dtype != dtype or arr.ndim != 1 or (size is not None and arr.size != size):
                raise ValueError(f"RequestTable.{name}: expected {np.dtype(dtype)}[{size}]")
        if self.hash_offsets[0] != 0 or self.hash_offsets[-1] != self.hashes.size:
            raise ValueError("RequestTable.hash_offsets: must span hashes exactly")
        if self.hash_block_size > 0:
            counts, bs = np.diff(self.hash_offsets), self.hash_block_size
            full_prompt = self.prompt_tokens // bs
            full_seq = (self.prompt_tokens + self.decode_tokens) // bs
            if np.any(counts < full_prompt) or np.any(counts > full_seq):
                raise ValueError(
                    "RequestTable.hashes: need one per full prompt block at most "
                    "one per full prompt+output block"
                )
        elif self.hashes.size:
            raise ValueError("RequestTable.hash_block_size: must be > 0 when hashes exist")

    def __len__(self) -> int:
        return self.arrival_s.shape[0]

    @property
    def has_hashes(self) -> bool:
        return self.hash_block_size > 0

    @property
    def has_sessions(self) -> bool:
        return bool(np.any(self.session_id != NO_ID))

    @property
    def num_hashes(self) -> np.ndarray:
        """int64[n] number of block hashes per request."""
        return np.diff(self.hash_offsets)

    def hashes_of(self, i: int) -> np.ndarray:
        """Block hashes of request i (a view)."""
        return self.hashes[self.hash_offsets[i] : self.hash_offsets[i + 1]]

    def summary(self) -> dict:
        """Counts, arrival span and length statistics as plain Python numbers."""
        n = len(self)
        duration = float(self.arrival_s[-1] - self.arrival_s[0]) if n else 0.0
        out: dict = {
            "count": n,
            "first_arrival_s": float(self.arrival_s[0]) if n else None,
            "duration_s": duration,
            "qps": n / duration if duration > 0 else None,
            "prompt_tokens": _stats(self.prompt_tokens),
            "decode_tokens": _stats(self.decode_tokens),
            "total_tokens": int(self.prompt_tokens.sum() + self.decode_tokens.sum()),
            "num_sessions": _count_distinct(self.session_id[self.session_id != NO_ID]),
            "hash_block_size": self.hash_block_size,
            "num_hashes": int(self.hashes.size),
            "num_distinct_hashes": _count_distinct(self.hashes),
        }
        return out

    def to_frame(self):
        """One row per request (hash lists are summarised by their count)."""
        import pandas as pd

        return pd.DataFrame(
            {
                "arrival_s": self.arrival_s,
                "prompt_tokens": self.prompt_tokens,
                "decode_tokens": self.decode_tokens,
                "session_id": self.session_id,
                "num_block_hashes": self.num_hashes,
                "source_row": self.source_row,
            },
        ).rename_axis("request_id")


def _count_distinct(x: np.ndarray) -> int:
    # Sort-based: np.unique in numpy 2.4 hashes, and takes ~15 s on 9M random int64s.
    if x.size == 0:
        return 0
    y = np.sort(x)
    return int(1 + np.count_nonzero(y[1:] != y[:-1]))


def _stats(x: np.ndarray) -> dict:
    if x.size == 0:
        return {"mean": None, "min": None, "max": None} | {f"p{p}": None for p in _PERCENTILES}
    pct = np.percentile(x, _PERCENTILES)
    return {
        "mean": float(x.mean()),
        "min": int(x.min()),
        "max": int(x.max()),
    } | {f"p{p}": float(v) for p, v in zip(_PERCENTILES, pct, strict=True)}


def make_table(
    arrival_s: np.ndarray,
    prompt_tokens: np.ndarray,
    decode_tokens: np.ndarray,
    *,
    session_id: np.ndarray | None = None,
    hash_offsets: np.ndarray | None = None,
    hashes: np.ndarray | None = None,
    hash_block_size: int = 0,
    source_row: np.ndarray | None = None,
    source: str = "",
    copy: bool = True,
) -> RequestTable:
    """Coerce dtypes, sort stably by arrival (carrying hash lists along) and freeze.

    copy=False hands the arrays over (no copy when dtypes already match) and marks them
    read-only; the caller must not keep writing to them.
    """
    arrival_s = np.asarray(arrival_s, dtype=np.float64)
    n = arrival_s.size
    prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
    decode_tokens = np.asarray(decode_tokens, dtype=np.int64)
    session_id = (
        np.full(n, NO_ID, dtype=np.int64)
        if session_id is None
        else np.asarray(session_id, dtype=np.int64)
    )
    source_row = (
        np.arange(n, dtype=np.int64) if source_row is None else np.asarray(source_row, np.int64)
    )
    if hashes is None or hash_offsets is None:
        hash_offsets, hashes, hash_block_size = np.zeros(n + 1, np.int64), np.zeros(0, np.int64), 0
    hash_offsets = np.asarray(hash_offsets, dtype=np.int64)
    hashes = np.asarray(hashes, dtype=np.int64)
    if hashes.size and np.any(hashes == NO_HASH):
        raise ValueError("make_table: hashes must never be NO_HASH")

    order = np.argsort(arrival_s, kind="stable")
    if np.any(order != np.arange(n)):
        if hashes.size:
            hash_offsets, hashes = gather_segments(hashes, hash_offsets, order)
        arrival_s, prompt_tokens, decode_tokens = (
            arrival_s[order],
            prompt_tokens[order],
            decode_tokens[order],
        )
        session_id, source_row = session_id[order], source_row[order]

    def frozen(x: np.ndarray) -> np.ndarray:
        out = np.array(x, order="C", copy=True) if copy else np.ascontiguousarray(x)
        out.flags.writeable = False
        return out

    return RequestTable(
        arrival_s=frozen(arrival_s),
        prompt_tokens=frozen(prompt_tokens),
        decode_tokens=frozen(decode_tokens),
        session_id=frozen(session_id),
        hash_offsets=frozen(hash_offsets),
        hashes=frozen(hashes),
        hash_block_size=int(hash_block_size),
        source_row=frozen(source_row),
        source=source,
    )
