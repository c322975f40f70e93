"""Synthetic arrival times and request lengths, drawn as whole arrays.

Each purpose (arrivals, lengths, trace row order) has its own numpy Generator derived from the
workload seed, so changing one generator's parameters never shifts another's draws.
"""

from enum import IntEnum

import numpy as np

from vidur_fast.config.workload import (
    FixedLengths,
    GammaIntervals,
    PoissonIntervals,
    StaticIntervals,
    TraceIntervals,
    TraceLengths,
    UniformIntervals,
    UniformLengths,
    ZipfLengths,
)
from vidur_fast.errors import TraceError
from vidur_fast.numerics import portable_math as pm
from vidur_fast.workload.hashes import as_u64, combine
from vidur_fast.workload.readers import read_trace

_MAX_CHUNK = 1 << 20


class Stream(IntEnum):
    """Independent random streams of one workload build."""

    INTERVALS = 0
    LENGTHS = 1
    TRACE_ORDER = 2


def rng_for(seed: int, stream: Stream) -> np.random.Generator:
    """Generator for one purpose: child `stream` of SeedSequence(seed)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(int(stream),)))


def scale_tokens(raw: np.ndarray, scale: float) -> np.ndarray:
    """Vidur's rule: multiply, truncate toward zero, at least 1 token."""
    scaled = np.maximum(np.trunc(raw * scale), 1)
    if scaled.size and not scaled.max() < 2**62:  # would wrap in int64
        raise TraceError(f"token lengths x{scale:g} reach {scaled.max():g}, beyond int64")
    return scaled.astype(np.int64)


# ---- arrivals ----


def _gaps(cfg: object, rng: np.random.Generator, size: int) -> np.ndarray:
    match cfg:
        case PoissonIntervals(qps=qps, truncate=truncate):
            gaps = rng.exponential(1.0 / qps, size)
            # NOTE(vidur): PoissonRequestIntervalGenerator clips gaps at 3/qps.
            return np.minimum(gaps, 3.0 / qps) if truncate else gaps
        case GammaIntervals(qps=qps, cv=cv):
            shape = 1.0 / (cv * cv)
            return rng.gamma(shape, 1.0 / (qps * shape), size)
    raise TypeError(f"no gap sampler for {type(cfg).__name__}")


def _trace_arrivals(cfg: TraceIntervals, num_requests: int | None, where: str) -> np.ndarray:
    data = read_trace(cfg.path, need_arrivals=True, max_rows=num_requests)
    if num_requests is not None and len(data) < num_requests:
        raise TraceError(
            f"{cfg.path}: {where}.num_requests is {num_requests} but the file has only "
            f"{len(data)} data rows"
        )
    return (data.arrival_s - data.arrival_s[0]) * cfg.time_scale


def draw_arrivals(
    cfg: object,
    rng: np.random.Generator,
    num_requests: int | None,
    duration_s: float | None,
    where: str = "workload",
) -> np.ndarray:
    """Arrival times (s, non-decreasing): the first request arrives at its first gap.

    Stops at num_requests, or keeps arrivals < duration_s, whichever ends first. Trace
    intervals replay the file's arrivals relative to its first row (the first is at 0).
    """
    if isinstance(cfg, TraceIntervals):
        arrivals = _trace_arrivals(cfg, num_requests, where)
    elif isinstance(cfg, StaticIntervals):
        arrivals = np.zeros(num_requests, dtype=np.float64)
    elif isinstance(cfg, UniformIntervals):
        count = num_requests
        if duration_s is not None:
            # request k (1-based) arrives at k/qps; the filter below trims to < duration_s
            in_window = int(np.ceil(duration_s * cfg.qps)) + 1
            count = in_window if count is None else min(count, in_window)
        arrivals = np.arange(1, count + 1, dtype=np.float64) / cfg.qps
    elif duration_s is None:
        arrivals = np.cumsum(_gaps(cfg, rng, num_requests))
    else:
        arrivals = _arrivals_until(cfg, rng, num_requests, duration_s)
    if duration_s is not None:
        arrivals = arrivals[arrivals < duration_s]
    if num_requests is not None:
        arrivals = arrivals[:num_requests]
    return np.ascontiguousarray(arrivals, dtype=np.float64)


def _arrivals_until(
    cfg: object, rng: np.random.Generator, num_requests: int | None, duration_s: float
) -> np.ndarray:
    """Draw gaps chunk by chunk until the last arrival passes duration_s (or enough exist)."""
    expected = int(duration_s * cfg.qps * 1.1) + 64
    chunk = min(expected if num_requests is None else min(expected, num_requests), _MAX_CHUNK)
    parts, last, drawn = [], 0.0, 0
    while True:
        part = last + np.cumsum(_gaps(cfg, rng, chunk))
        parts.append(part)
        last, drawn = float(part[-1]), drawn + chunk
        if last >= duration_s or (num_requests is not None and drawn >= num_requests):
            return np.concatenate(parts)


# ---- lengths ----


def split_total(total: np.ndarray, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """decode = ceil(total / (1 + ratio)), prefill = total - decode, both kept >= 1."""
    decode = np.ceil(total / (1.0 + ratio)).astype(np.int64)
    decode = np.clip(decode, 1, total - 1)
    return total - decode, decode


def zipf_totals(cfg: ZipfLengths, rng: np.random.Generator, size: int, seed: int) -> np.ndarray:
    """YCSB Zipfian over [min_tokens, max_tokens] (small values most popular).

    NOTE(vidur): ZipfGenerator sums zeta over 1..n-1; the YCSB definition (used here) is 1..n.
    """
    lo, theta = cfg.min_tokens, cfg.theta
    items = cfg.max_tokens - lo + 1
    u = rng.random(size)
    if items == 1:
        return np.full(size, lo, dtype=np.int64)
    zeta_n = float(np.sum(pm.power(np.arange(1, items + 1, dtype=np.float64), -theta)))
    zeta_2 = 1.0 + 0.5**theta
    uz = u * zeta_n
    values = np.where(uz < 1.0, 0, 1).astype(np.int64)
    tail = uz >= zeta_2
    if items > 2 and tail.any():
        eta = (1.0 - (2.0 / items) ** (1.0 - theta)) / (1.0 - zeta_2 / zeta_n)
        alpha = 1.0 / (1.0 - theta)
        values[tail] = np.floor(items * pm.power(eta * u[tail] - eta + 1.0, alpha)).astype(np.int64)
    values = np.minimum(values, items - 1)
    if cfg.scramble:
        # Fixed 64-bit mix keyed by the seed (Vidur uses Python's per-process salted hash()).
        salt = np.full(size, seed % 2**63, dtype=np.int64).view(np.uint64)
        values = (combine(salt, as_u64(values)) % np.uint64(items)).astype(np.int64)
    return lo + values


def draw_lengths(
    cfg: object, rng: np.random.Generator, size: int, seed: int, where: str = "workload.lengths"
) -> tuple[np.ndarray, np.ndarray]:
    """(prompt_tokens, decode_tokens) int64 arrays of length `size`."""
    match cfg:
        case FixedLengths():
            return (
                np.full(size, cfg.prefill_tokens, dtype=np.int64),
                np.full(size, cfg.decode_tokens, dtype=np.int64),
            )
        case UniformLengths():
            total = rng.integers(cfg.min_tokens, cfg.max_tokens, size=size, endpoint=True)
            return split_total(total.astype(np.int64), cfg.prefill_to_decode_ratio)
        case ZipfLengths():
            return split_total(zipf_totals(cfg, rng, size, seed), cfg.prefill_to_decode_ratio)
        case TraceLengths():
            return _trace_lengths(cfg, rng_for(seed, Stream.TRACE_ORDER), size)
    raise TypeError(f"{where}: no length sampler for {type(cfg).__name__}")


def trace_length_rows(cfg: TraceLengths, seed: int, rows: int, size: int) -> np.ndarray:
    """Which file row each of `size` requests takes: rows in a seeded random order (or file
    order), wrapping around when exhausted."""
    rng = rng_for(seed, Stream.TRACE_ORDER)
    order = rng.permutation(rows) if cfg.shuffle else np.arange(rows)
    return order[np.arange(size) % rows]


def _trace_lengths(
    cfg: TraceLengths, rng: np.random.Generator, size: int
) -> tuple[np.ndarray, np.ndarray]:
    data = read_trace(cfg.path, need_arrivals=False)
    rows = len(data)
    order = rng.permutation(rows) if cfg.shuffle else np.arange(rows)
    pick = order[np.arange(size) % rows]
    return (
        scale_tokens(data.prompt_tokens[pick], cfg.prefill_scale),
        scale_tokens(data.decode_tokens[pick], cfg.decode_scale),
    )
