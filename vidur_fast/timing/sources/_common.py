"""Helpers shared by the timing sources: sample grids, frame builders, memory-bound token ops,
log-log interpolation and file digests."""

import hashlib
import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from vidur_fast.catalog import ModelSpec
from vidur_fast.errors import ProfileError
from vidur_fast.numerics import portable_math as pm

BF16_BYTES = 2
MAX_TOKENS = 131072  # token-op / collective samples reach 128K tokens
MAX_KV = 131072  # cached-prefix length of prefill samples and kv length of decode samples
MAX_CHUNK = 16384  # prefill chunk
MAX_DECODE_BATCH = 512  # analytic decode samples (measured tables go further)
PRECISIONS = ("bf16", "fp8")
# bytes per KV-cache element by kv_cache_dtype (activations stay bf16)
KV_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}

TOKEN_COLUMNS = ("op", "num_tokens", "time_ms")
DECODE_COLUMNS = ("batch_size", "kv_len", "time_ms")
PREFILL_COLUMNS = ("kv_len", "chunk", "time_ms")
COMM_COLUMNS = ("num_tokens", "time_ms")


def kv_bytes_of(source: str, kv_cache_dtype: str) -> int:
    """Bytes per KV-cache element; ProfileError for an unknown dtype."""
    if kv_cache_dtype not in KV_BYTES:
        raise profile_error(
            source, f"unknown kv_cache_dtype {kv_cache_dtype!r}; available: {join(KV_BYTES)}"
        )
    return KV_BYTES[kv_cache_dtype]


def kv_provenance(kv_cache_dtype: str) -> dict:
    """Provenance entry of the KV-cache dtype; a bf16/fp16 cache (same bytes, same kernels
    measured) adds nothing, so the keys of grids built before the option existed still hold."""
    return {} if KV_BYTES.get(kv_cache_dtype) == BF16_BYTES else {"kv_cache_dtype": kv_cache_dtype}


def profile_error(source: str, message: str) -> ProfileError:
    """A one-line ProfileError prefixed with the config field that chose the source."""
    return ProfileError(f"predictor.source={source}: {message}")


def join(values) -> str:
    return ", ".join(str(v) for v in values) if len(values) else "none"


# ---- sample grids ----


def quarter_octave_grid(lo: int, hi: int) -> np.ndarray:
    """Integers lo..16, then 2^i * {1, 1.25, 1.5, 1.75} up to hi (hi always included).

    Contains every power of two and every midpoint between them, dense enough for tree models
    to follow latency curves that are smooth in log space.
    """
    vals = set(range(max(lo, 1), min(16, hi) + 1))
    p = 16
    while p <= hi:
        for f in (1.0, 1.25, 1.5, 1.75):
            v = int(p * f)
            if lo <= v <= hi:
                vals.add(v)
        p *= 2
    vals.add(hi)
    return np.array(sorted(vals), dtype=np.int64)


TOKEN_COUNTS = quarter_octave_grid(1, MAX_TOKENS)
PREFILL_KV = np.concatenate([[0], quarter_octave_grid(16, MAX_KV)])
PREFILL_CHUNKS = quarter_octave_grid(1, MAX_CHUNK)
DECODE_BATCHES = quarter_octave_grid(1, MAX_DECODE_BATCH)
DECODE_KV = quarter_octave_grid(1, MAX_KV)


# ---- frame builders ----


def token_ops_frame(parts: dict[str, tuple[np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """Long frame (op, num_tokens, time_ms) from {op: (num_tokens, time_ms)}."""
    frames = [
        pd.DataFrame(
            {
                "op": op,
                "num_tokens": np.asarray(n, dtype=np.int64),
                "time_ms": np.asarray(t, dtype=np.float64),
            }
        )
        for op, (n, t) in parts.items()
    ]
    if not frames:
        return empty_frame(TOKEN_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def frame(columns: tuple[str, ...], *arrays) -> pd.DataFrame:
    """A frame with the given columns; every column but the last (time_ms) is int64."""
    data = {}
    for name, arr in zip(columns, arrays, strict=True):
        dtype = np.float64 if name == "time_ms" else np.int64
        data[name] = np.asarray(arr, dtype=dtype)
    return pd.DataFrame(data)


def empty_frame(columns: tuple[str, ...]) -> pd.DataFrame:
    out = pd.DataFrame({c: pd.Series(dtype=np.float64) for c in columns})
    for c in columns:
        if c == "op":
            out[c] = out[c].astype(object)
        elif c != "time_ms":
            out[c] = out[c].astype(np.int64)
    return out


# ---- per-layer shapes ----


def linear_shapes(model: ModelSpec, tp: int) -> dict[str, tuple[int, int]]:
    """(n, k) of each linear layer on one GPU after TP sharding; m is the token count."""
    e, d = model.embedding_dim, model.head_dim
    hq, hkv = model.q_heads_per_worker(tp), model.kv_heads_per_worker(tp)
    h = -(-model.mlp_hidden_dim // tp)
    return {
        "attn_pre_proj": ((hq + 2 * hkv) * d, e),
        "attn_post_proj": (e, hq * d),
        "mlp_up_proj": ((2 if model.use_gated_mlp else 1) * h, e),
        "mlp_down_proj": (e, h),
    }


# ---- memory-bound token ops ----


def elementwise_bytes(
    model: ModelSpec, tp: int, kv_bytes: int = BF16_BYTES
) -> dict[str, tuple[float, float]]:
    """Bytes each non-GEMM token op of one layer moves on one GPU: (per token, per call).

    bf16 activations. Norms read and write the full hidden row (not TP-sharded) plus their
    weight once; the residual add reads two rows and writes one; rope reads and writes the
    local q and k heads plus a cos/sin row (Qwen3's q/k norm is one more read+write, fused into
    this op); the gated activation reads gate and up and writes their product; the KV-cache
    save reads the new K and V and writes them into the paged cache (plus an int64 slot index)
    at kv_bytes per element (1 for an fp8 cache).
    """
    e, d = model.embedding_dim, model.head_dim
    hq, hkv = model.q_heads_per_worker(tp), model.kv_heads_per_worker(tp)
    h_local = model.mlp_hidden_dim / tp
    b = BF16_BYTES
    norm = (2 * e * b, e * b)
    qk = (hq + hkv) * d
    rope = 2 * qk * b + d * b + (2 * qk * b if model.qk_norm else 0)
    act = (3 if model.use_gated_mlp else 2) * h_local * b
    out = {
        "input_layernorm": norm,
        "attn_rope": (rope, 0.0),
        "mlp_act": (act, 0.0),
        "add": (3 * e * b, 0.0),
        "attn_kv_cache_save": (2 * hkv * d * (b + kv_bytes) + 8, 0.0),
    }
    if model.post_attn_norm:
        out["post_attention_layernorm"] = norm
    return out


# vLLM's fuse_allreduce_rms pass fuses a TP all-reduce of at most this many MB with the residual
# add and RMSNorm after it (PassConfig.fi_allreduce_fusion_max_size_mb, Hopper defaults)
ALLREDUCE_RMS_FUSION_MAX_MB = {2: 64.0, 4: 2.0, 8: 1.0}
FUSED_AFTER_ALLREDUCE = ("input_layernorm", "post_attention_layernorm", "add")


def fuse_allreduce_rms(
    parts: dict[str, tuple[np.ndarray, np.ndarray]], model: ModelSpec, tp: int
) -> dict | None:
    """Zero the residual add and RMSNorms that vLLM's fuse_allreduce_rms pass runs inside the
    TP all-reduce before them, at the token counts whose all-reduce (tokens x hidden in bf16)
    is within the pass's size limit for tp GPUs; returns the rule's provenance (None: no TP
    all-reduce, or a TP size the pass does not fuse). Mutates: parts."""
    limit = ALLREDUCE_RMS_FUSION_MAX_MB.get(tp)
    if limit is None:
        return None
    max_tokens = int(limit * 2**20 // (model.embedding_dim * BF16_BYTES))
    for op in FUSED_AFTER_ALLREDUCE:
        if op in parts:
            n, t = parts[op]
            parts[op] = (n, np.where(np.asarray(n) <= max_tokens, 0.0, t))
    return {"max_mb": limit, "max_tokens": max_tokens, "ops": list(FUSED_AFTER_ALLREDUCE)}


def memory_bound_token_ops(
    model: ModelSpec,
    tp: int,
    tokens: np.ndarray,
    bytes_per_s: float,
    const_ms: float,
    kv_bytes: int = BF16_BYTES,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{op: (tokens, time_ms)} for the non-GEMM ops: bytes / effective bandwidth + constant."""
    tokens = np.asarray(tokens, dtype=np.int64)
    out = {}
    for op, (per_token, fixed) in elementwise_bytes(model, tp, kv_bytes).items():
        t = (tokens * per_token + fixed) / bytes_per_s * 1e3 + const_ms
        out[op] = (tokens, t)
    return out


# ---- interpolation ----


def interp_loglog(x, xp, fp, above_exponent: float = 1.0) -> np.ndarray:
    """Piecewise-linear interpolation of log(fp) over log(xp).

    Below xp[0] the first value is kept (latency floor); above xp[-1] the last value is scaled
    by (x / xp[-1]) ** above_exponent (1 = work grows linearly, 2 = quadratically).
    """
    x = np.asarray(x, dtype=np.float64)
    xp = np.asarray(xp, dtype=np.float64)
    fp = np.asarray(fp, dtype=np.float64)
    lx = pm.log(np.clip(x, xp[0], xp[-1]))
    y = pm.exp(np.interp(lx, pm.log(xp), pm.log(fp)))
    above = x > xp[-1]
    y[above] = fp[-1] * pm.power(x[above] / xp[-1], above_exponent)
    return y


# ---- provenance ----


@lru_cache(maxsize=256)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def file_digest(path: Path) -> str:
    """First 16 hex digits of the file's sha256 (cached per path, mtime and size)."""
    st = os.stat(path)
    return _digest(str(path), st.st_mtime_ns, st.st_size)
