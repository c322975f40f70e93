"""Synthetic operator samples for the timing-fit tests: linear in the work features, measured
on a small range, with a small predictor configuration to fit them."""

import numpy as np
import pandas as pd

from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.timing.fit import TOKEN_OPS
from vidur_fast.timing.samples import OperatorSamples


def tok_time(n):
    return 0.01 + 2e-5 * n


def decode_time(b, kv):
    return 0.008 + 1e-4 * b + 1e-6 * b * kv


def prefill_time(c, kv):
    return 0.01 + 1e-5 * c + 1e-7 * (c * kv + c * c / 2)


TOK_N = np.r_[1, 2, 4, np.arange(8, 1025, 8)]
DEC_BMAX, DEC_KV_BUDGET, PRE_MAX_LEN = 32, 16384, 1024


def synthetic_samples(noise: float = 0.01, seed: int = 0) -> OperatorSamples:
    rng = np.random.default_rng(seed)

    def jitter(t):
        return t * (1 + noise * rng.standard_normal(len(t)))

    tok = pd.concat(
        [
            pd.DataFrame({"op": op, "num_tokens": TOK_N, "time_ms": jitter(tok_time(TOK_N))})
            for op in TOKEN_OPS
        ],
        ignore_index=True,
    )
    b, kv = np.meshgrid(np.arange(1, DEC_BMAX + 1), np.arange(32, 1025, 32), indexing="ij")
    keep = b * kv <= DEC_KV_BUDGET  # memory limit leaves a staircase
    b, kv = b[keep], kv[keep]
    dec = pd.DataFrame({"batch_size": b, "kv_len": kv, "time_ms": jitter(decode_time(b, kv))})
    pre_rows = [(k, c) for c in range(32, 513, 32) for k in range(0, PRE_MAX_LEN - c + 1, c)]
    k, c = np.array(pre_rows).T
    pre = pd.DataFrame({"kv_len": k, "chunk": c, "time_ms": jitter(prefill_time(c, k))})
    n = np.arange(8, 1025, 8)
    comm = pd.DataFrame({"num_tokens": n, "time_ms": jitter(tok_time(n))})
    return samples_of(tok, dec, pre, comm, {"seed": seed})


def samples_of(tok, dec=None, pre=None, comm=None, provenance=None) -> OperatorSamples:
    """Synthetic OperatorSamples of the frames given: a family left out is an empty frame of
    its columns, and the all-reduce frame serves send/recv too."""

    def empty(*columns):
        return pd.DataFrame({c: [] for c in columns})

    dec = empty("batch_size", "kv_len", "time_ms") if dec is None else dec
    pre = empty("kv_len", "chunk", "time_ms") if pre is None else pre
    comm = empty("num_tokens", "time_ms") if comm is None else comm
    return OperatorSamples("synthetic", tok, dec, pre, comm, comm.copy(), provenance or {})


SMALL = PredictorConfig(
    n_estimators=10,
    max_tokens=4096,
    max_batch_size=64,
    max_prefill_chunk=2048,
    kv_granularity=16,
    chunk_granularity=32,
    cache_mode="ignore",
)
