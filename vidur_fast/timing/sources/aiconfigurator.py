"""Operator samples from NVIDIA aiconfigurator's measured kernel database.

Tables are per GPU, latency in ms, message sizes in elements (see docs/timing_sources.md).
What the database does not measure is derived here by explicit, documented models:
GEMM shapes of the model (log-space bilinear interpolation over measured (n, k)), non-GEMM token
ops (memory-bound), prefill over a cached prefix (equal-attended-pairs rule plus KV-read
floors) and PP send/recv (latency + bytes / link bandwidth from the system YAML).
"""

import math
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from vidur_fast.catalog import DeviceSpec, ModelSpec, NodeSpec, get_device, list_devices
from vidur_fast.catalog.arch import (
    SLIDING,
    attention_kinds,
    expert_format,
    moe_parallel,
    qk_norm_spans_heads,
    router_gate_fp32,
)
from vidur_fast.errors import ProfileError
from vidur_fast.timing.samples import OperatorSamples
from vidur_fast.timing.sources._aic_data import (
    BACKENDS,
    PACKAGE,
    SOURCE,
    AicSystem,
    backends_with,
    get_system,
    list_systems,
    newest_table,
    pick_fastest_kernel,
    read_table,
    systems_root,
    table_versions,
)
from vidur_fast.timing.sources._aic_gemm import (
    GemmTable,
    gemm_table,
    interpolate_gemm,
)
from vidur_fast.timing.sources._aic_mla import mla_attention
from vidur_fast.timing.sources._aic_moe import (
    EXPERT_DTYPES,
    MOE_TABLE,
    SHARED_STREAM_MAX_TOKENS,
    expert_curve,
    fp32_router_ms,
    layer_weights,
    model_roofline_ms,
    moe_rows,
    nccl_curve,
    overlap_shared,
    tokens_curve,
)
from vidur_fast.timing.sources._common import (
    BF16_BYTES,
    COMM_COLUMNS,
    DECODE_COLUMNS,
    MAX_TOKENS,
    PREFILL_CHUNKS,
    PREFILL_COLUMNS,
    PREFILL_KV,
    TOKEN_COUNTS,
    empty_frame,
    file_digest,
    frame,
    fuse_allreduce_rms,
    interp_loglog,
    join,
    kv_bytes_of,
    kv_provenance,
    linear_shapes,
    memory_bound_token_ops,
    profile_error,
    token_ops_frame,
)

# precision -> gemm_dtype of the measured GEMMs: per-tensor fp8, 128x128 block-scaled fp8
# (the layout of DeepSeek-style and Qwen3 "-FP8" checkpoints), or NVFP4 (e2m1 values with an
# e4m3 scale per 16 elements; vLLM measures it on Blackwell only, FlashInfer's kernel)
GEMM_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4"}
# kv_cache_dtype -> kv_cache_dtype of the measured attention kernels (fp16 runs the bf16 ones)
ATTN_KV_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}


# ---- token ops ----


def _gemm_ops(table: GemmTable, model: ModelSpec, tp: int, shapes: dict | None = None) -> dict:
    """Samples at every measured m, then work-linear (t ~ m) beyond the largest measured m.

    shapes: {op: (n, k)} (default: the model's linear layers after TP sharding)."""
    out = {}
    for op, (n, k) in (shapes or linear_shapes(model, tp)).items():
        t = interpolate_gemm(table, n, k)
        ok = np.isfinite(t)
        m, t = table.m[ok], t[ok]
        ext = TOKEN_COUNTS[TOKEN_COUNTS > m[-1]]
        out[op] = (np.concatenate([m, ext]), np.concatenate([t, t[-1] * ext / m[-1]]))
    return out


def _block_fp8_floor(parts: dict, gemm_path, model, tp, envelope) -> tuple[dict, str | None]:
    """Block-scaled FP8 GEMMs timed by the faster of the fp8_block table and the per-tensor
    fp8 table at each token count.

    vLLM's block-scaled kernels in the tables (DeepGEMM from m = 64, FlashInfer below) have a
    55-85 us floor on H100/H200 at every shape up to m = 1024 (a 1024 x 3072 GEMM: 79 us at
    m = 64 and 85 us at m = 1024, where bf16 takes 7-12 us and per-tensor fp8 7-25 us), i.e. time
    outside the GEMM that a CUDA-graph replay does not pay. The measured decode steps of
    block-FP8 checkpoints leave no room for it: MiniMax-M2.5 at TP 8 on H200 with 4 clients
    decodes in 8.0 ms for 62 layers, while two such GEMMs per layer alone would take 7.2 ms.
    The floor is the host dispatch of an eager call: aiconfigurator's vLLM GEMM collector times
    block-FP8 GEMMs without CUDA graphs (bf16 and per-tensor fp8 with them).
    Above the floor the two kernels do the same FP8 tensor-core work (block scales add 1/16384
    of the weight bytes), so the faster measured one stands for the engine's kernel."""
    try:
        fp8 = gemm_table(gemm_path, GEMM_DTYPES["fp8"], envelope=envelope)
    except ProfileError:
        return parts, None
    other = _gemm_ops(fp8, model, tp)
    out = {}
    for op, (m, t) in parts.items():
        m2, t2 = other[op]
        grid = np.union1d(m, m2)
        a = interp_loglog(grid, m, t, above_exponent=1.0)
        b = interp_loglog(grid, m2, t2, above_exponent=1.0)
        out[op] = (grid, np.minimum(a, b))
    return out, "fastest of the fp8_block and per-tensor fp8 tables"


# ---- attention ----

ATTN_KEYS = ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim", "latency")
ATTN_FILTERS = {  # optional columns and the value kept (kv_cache_dtype: see attention_rows)
    "attn_dtype": "bfloat16",
    "window_size": 0,
    "beam_width": 1,
}


@dataclass(frozen=True)
class HeadMatch:
    """Measured head configuration used for the model's (q, kv, head_dim) on one GPU."""

    q: int
    kv: int
    head_dim: int
    prefill_scale: float  # (q * d) / (q' * d'): prefill FLOPs ratio
    decode_scale: float  # (kv * d) / (kv' * d'): decode KV-bytes ratio
    # both applied with scale_above_floor

    def describe(self) -> str:
        return f"q={self.q} kv={self.kv} d={self.head_dim}"


def scale_above_floor(t: np.ndarray, ratio: float) -> np.ndarray:
    """t_min + (t - t_min) * ratio: the work scales with the head ratio, the launch floor of
    the kernel (its fastest measured latency) does not."""
    floor = np.nanmin(t)
    return floor + (t - floor) * ratio


def attention_rows(path: Path, context: bool, kv_cache_dtype: str = "bf16") -> pd.DataFrame:
    filters = {**ATTN_FILTERS, "kv_cache_dtype": ATTN_KV_DTYPES[kv_cache_dtype]}
    df = read_table(path, ATTN_KEYS, tuple(filters) + ("kernel_source",))
    keep = (df.batch_size == 1) & (df.step == 0) if context else df.isl == 1
    for col, val in filters.items():
        if col in df:
            keep &= df[col] == val
        elif col == "kv_cache_dtype" and val != "bfloat16":
            keep &= False  # a table without the column measured a bf16 cache only
    rows = df[keep]
    if rows.empty:
        raise profile_error(
            SOURCE, f"{path} has no full-window rows with a {kv_cache_dtype} KV cache"
        )
    return rows


def match_heads(rows: pd.DataFrame, q: int, kv: int, d: int) -> HeadMatch:
    """The nearest measured (q, kv, head_dim): same head_dim first, then the smallest
    |log q ratio| + |log kv ratio| (ties: the larger shape)."""
    combos = rows[["num_heads", "num_key_value_heads", "head_dim"]].drop_duplicates()
    best = min(
        combos.itertuples(index=False),
        key=lambda c: (
            abs(math.log(d / c[2])),
            abs(math.log(q / c[0])) + abs(math.log(kv / c[1])),
            -c[0],
            -c[1],
        ),
    )
    mq, mkv, md = (int(x) for x in best)
    return HeadMatch(mq, mkv, md, (q * d) / (mq * md), (kv * d) / (mkv * md))


def select_heads(rows: pd.DataFrame, match: HeadMatch, keys: list[str]) -> pd.DataFrame:
    """Rows of the matched head configuration, one (fastest-kernel) latency per key."""
    sel = rows[
        (rows.num_heads == match.q)
        & (rows.num_key_value_heads == match.kv)
        & (rows.head_dim == match.head_dim)
    ]
    return pick_fastest_kernel(sel, keys).sort_values(keys, ignore_index=True)


def full_prefill_curve(rows: pd.DataFrame, match: HeadMatch) -> tuple[np.ndarray, np.ndarray]:
    """(isl, ms) of a single full prefill with no cached prefix, head-scaled; a running max
    over isl removes timing noise at tiny lengths so the curve is monotone."""
    sel = select_heads(rows, match, ["isl"])
    t = np.maximum.accumulate(scale_above_floor(sel.latency.to_numpy(), match.prefill_scale))
    return sel.isl.to_numpy(dtype=np.int64), t


def equivalent_chunk(kv, chunk) -> np.ndarray:
    """Length L of a prefill from scratch attending as many (query, key) pairs as `chunk` new
    tokens over `kv` cached ones: L(L+1)/2 = chunk*kv + chunk(chunk+1)/2 (causal)."""
    kv = np.asarray(kv, dtype=np.float64)
    c = np.asarray(chunk, dtype=np.float64)
    pairs = c * kv + c * (c + 1) / 2
    return (np.sqrt(1 + 8 * pairs) - 1) / 2


def kv_read_floor_ms(
    kv,
    chunk,
    q: int,
    kvh: int,
    d: int,
    bytes_per_s: float,
    const_ms: float,
    kv_bytes: int = BF16_BYTES,
):
    """Lower bound of chunked-prefill attention: read the whole K/V once, read Q, write O."""
    kv = np.asarray(kv, dtype=np.float64)
    c = np.asarray(chunk, dtype=np.float64)
    nbytes = (kv + c) * 2 * kvh * d * kv_bytes + 2 * c * q * d * BF16_BYTES
    return nbytes / bytes_per_s * 1e3 + const_ms


def single_decode_floor_ms(decode: pd.DataFrame, kv, chunk) -> np.ndarray:
    """Measured decode of one request whose last query sees the same kv + chunk positions:
    a chunk over a cached prefix reads at least that KV with the same kind of kernel.
    Running max over kv (monotone), log-log between measured kv, linear in kv beyond."""
    one = decode[decode.batch_size == 1].sort_values("kv_len")
    positions = one.kv_len.to_numpy(dtype=np.float64) + 1
    t = np.maximum.accumulate(one.time_ms.to_numpy())
    x = np.asarray(kv, dtype=np.float64) + np.asarray(chunk, dtype=np.float64)
    return interp_loglog(x, positions, t, above_exponent=1.0)


def derive_prefill(isl, t_full, kv, chunk, floor_ms) -> np.ndarray:
    """t(kv, chunk) = t_full(L_eq) (work-quadratic beyond the largest measured isl), at least
    `floor_ms` (KV-read floors) when kv > 0; exactly t_full(chunk) at kv = 0."""
    t = interp_loglog(equivalent_chunk(kv, chunk), isl, t_full, above_exponent=2.0)
    return np.where(np.asarray(kv) > 0, np.maximum(t, floor_ms), t)


def decode_samples(rows: pd.DataFrame, match: HeadMatch) -> tuple[pd.DataFrame, int]:
    """Measured (batch, kv) decode latencies, head-scaled, on the table's full batch x step
    axes. Cells the benchmark skipped (for memory) are filled linearly in batch from the largest
    measured batch at that kv, then linearly in kv + 1 from the longest measured kv of that
    batch: decode is KV-bandwidth-bound there, so time ~ batch * (kv + 1).
    Returns (frame, number of filled cells)."""
    sel = select_heads(rows, match, ["batch_size", "step"])
    grid = sel.pivot(index="batch_size", columns="step", values="latency")
    grid = grid.reindex(columns=np.sort(rows.step.unique()))
    t = scale_above_floor(grid.to_numpy(copy=True), match.decode_scale)
    missing = ~np.isfinite(t)
    _fill_linear(t, grid.index.to_numpy(dtype=np.float64))
    _fill_linear(t.T, grid.columns.to_numpy(dtype=np.float64) + 1)
    b, kv = np.meshgrid(grid.index.to_numpy(), grid.columns.to_numpy(), indexing="ij")
    ok = np.isfinite(t)
    out = frame(DECODE_COLUMNS, b[ok], kv[ok], t[ok])
    return out, int((missing & ok).sum())


def _fill_linear(t: np.ndarray, x: np.ndarray) -> None:
    """In each column of t, NaNs above the last finite row get t_last * x / x_last.

    Mutates: t."""
    for j in range(t.shape[1]):
        ok = np.isfinite(t[:, j])
        if not ok.any():
            continue
        top = np.flatnonzero(ok)[-1]
        t[top + 1 :, j] = t[top, j] * x[top + 1 :] / x[top]


# ---- collectives ----


def _graph_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Prefer the CUDA-graph variant of a custom all-reduce when eager is measured too."""
    for col in ("backend", "kernel_source"):
        if col in df:
            graph = df[col].astype(str).str.contains("graph", case=False)
            if graph.any():
                return df[graph]
    return df


def _nccl_allreduce(system: AicSystem, tp: int) -> tuple[str | None, pd.DataFrame | None]:
    """(version, rows) of NCCL half all-reduce on tp GPUs: the YAML's nccl_version if it has
    them, else the newest version that does; (None, None) if none has."""
    versions = table_versions(system, "comm", "nccl", "nccl_perf.parquet")
    pinned = str((system.spec.get("misc") or {}).get("nccl_version", ""))
    for v in sorted(versions, key=lambda v: v != pinned):  # stable: pinned first, then newest
        path = system.data_dir / "comm" / "nccl" / v / "nccl_perf.parquet"
        df = read_table(path, ("op_name", "num_gpus", "message_size", "latency"), ("nccl_dtype",))
        keep = (df.op_name == "all_reduce") & (df.num_gpus == tp)
        if "nccl_dtype" in df:
            keep &= df.nccl_dtype == "half"
        if keep.any():
            return v, df[keep]
    return None, None


def _measured_tps(system: AicSystem, backend: str) -> list[int]:
    tps = set()
    for v in table_versions(system, "comm", backend, "custom_allreduce_perf.parquet")[:1]:
        path = system.data_dir / "comm" / backend / v / "custom_allreduce_perf.parquet"
        tps |= set(read_table(path, ("num_gpus",)).num_gpus.astype(int))
    for v in table_versions(system, "comm", "nccl", "nccl_perf.parquet"):
        path = system.data_dir / "comm" / "nccl" / v / "nccl_perf.parquet"
        df = read_table(path, ("op_name", "num_gpus"))
        tps |= set(df[df.op_name == "all_reduce"].num_gpus.astype(int))
    return sorted(tps)


def allreduce_curve(system: AicSystem, backend: str, tp: int, envelope: bool = True):
    """(message elements, ms, {table: version}, files): the backend's custom all-reduce up to its
    largest measured message, NCCL above it (or alone where no custom all-reduce exists).

    envelope=True: the fastest time measured at a message at least as large (a message can be
    reduced padded to a larger one), so the time never falls as the message grows; e.g. on
    B200 at TP 8 the custom all-reduce measured 26 us at 16-32 rows of 8192 (its one-shot
    algorithm) and 17 us at 64 rows."""
    versions, files, parts = {}, [], []
    top = 0
    custom = table_versions(system, "comm", backend, "custom_allreduce_perf.parquet")
    if custom:
        path = system.data_dir / "comm" / backend / custom[0] / "custom_allreduce_perf.parquet"
        df = read_table(
            path,
            ("num_gpus", "message_size", "latency"),
            ("allreduce_dtype", "backend", "kernel_source"),
        )
        rows = df[df.num_gpus == tp]
        if "allreduce_dtype" in rows:
            rows = rows[rows.allreduce_dtype == "bfloat16"]
        rows = _graph_rows(rows)
        if not rows.empty:
            rows = rows.groupby("message_size", as_index=False).latency.median()
            parts.append(rows)
            top = int(rows.message_size.max())
            versions["custom_allreduce"] = f"{backend}/{custom[0]}"
            files.append(path)
    nccl_version, nccl = _nccl_allreduce(system, tp)
    if nccl_version is not None:
        nccl = nccl.groupby("message_size", as_index=False).latency.median()
        above = nccl[nccl.message_size > top]
        if not above.empty:
            parts.append(above)
            versions["nccl"] = nccl_version
            files.append(system.data_dir / "comm" / "nccl" / nccl_version / "nccl_perf.parquet")
    if not parts:
        raise profile_error(
            SOURCE,
            f"no all-reduce measurements for TP {tp} on {system.name} (backend {backend}); "
            f"measured TP: {join(_measured_tps(system, backend))}",
        )
    curve = pd.concat(parts).sort_values("message_size")
    t = curve.latency.to_numpy()
    if envelope:
        t = np.minimum.accumulate(t[::-1])[::-1]
    return curve.message_size.to_numpy(), t, versions, files


# ---- sliding-window layers ----


def sliding_window_share(model: ModelSpec) -> tuple[int, float] | None:
    """(window, share of layers) of a model with sliding-window layers, else None."""
    kinds = attention_kinds(model)
    n = kinds.count(SLIDING)
    if not n or model.sliding_window <= 0:
        return None
    return model.sliding_window, n / len(kinds)


def window_pairs(kv, chunk, w: int) -> np.ndarray:
    """(query, key) pairs of `chunk` new tokens after `kv` cached ones when every query sees at
    most the last w positions (itself included): the sum of min(p, w) for p = kv+1 .. kv+chunk."""
    kv = np.asarray(kv, dtype=np.float64)
    c = np.asarray(chunk, dtype=np.float64)
    below = np.clip(w - kv, 0, c)  # queries whose view is not yet full
    return below * kv + below * (below + 1) / 2 + (c - below) * w


def equivalent_chunk_pairs(pairs) -> np.ndarray:
    """Length L of a causal prefill from scratch with L(L+1)/2 = pairs."""
    return (np.sqrt(1 + 8 * np.asarray(pairs, dtype=np.float64)) - 1) / 2


def window_decode(decode: pd.DataFrame, w: int, share: float) -> pd.DataFrame:
    """Decode samples of the mean layer: full layers at the sample's kv, sliding ones at
    min(kv, w) (per batch size, log-log over kv + 1 between measured points)."""
    out = decode.copy()
    t = out.time_ms.to_numpy(copy=True)
    for _, g in decode.groupby("batch_size"):
        g = g.sort_values("kv_len")
        pos = g.kv_len.to_numpy(dtype=np.float64) + 1
        at_w = interp_loglog(np.minimum(pos, w), pos, g.time_ms.to_numpy())
        idx = g.index.to_numpy()
        t[idx] = (1 - share) * g.time_ms.to_numpy() + share * at_w
    out["time_ms"] = t
    return out


# ---- mixture-of-experts layers ----


def _moe_ops(
    parts: dict, system, backend, device, model, tp, dp, ep, routing, precision, table,
    mem_bps, mem_const_ms, envelope, versions, files, kernel="",
) -> dict:  # fmt: skip
    """Add the MoE ops (_aic_moe) of one MoE layer to parts; returns their provenance.

    Mutates: parts, versions, files."""
    par = moe_parallel(model, tp, dp, ep)
    x = model.moe
    fmt = expert_format(model, precision)
    version, path, rows = moe_rows(system, backend)
    prov: dict = {"moe_tp": par.moe_tp, "moe_ep": par.moe_ep, "attention_dp": dp}
    if rows is None:  # no measured table on this system: the roofline (docs/timing_model.md)
        dtype = EXPERT_DTYPES.get(fmt)
        if dtype is None:
            raise profile_error(SOURCE, f"no expert format {fmt!r} for {model.name}")
        n = TOKEN_COUNTS
        t = model_roofline_ms(device, dtype, model, par, n * dp)
        prov.update(moe_dtype=dtype, distribution="balanced", rule="roofline (no moe_perf table)")
        parts["moe_experts"] = (n, t)
    else:
        versions["moe"] = f"{backend}/{version}"
        files.append(path)
        where = f"{system.name} {backend}/{version} {MOE_TABLE}"
        n, t, shape_prov = expert_curve(rows, device, model, par, fmt, routing, where, kernel)
        prov.update(shape_prov)
        parts["moe_experts"] = (TOKEN_COUNTS, tokens_curve(n, t, TOKEN_COUNTS, dp))
    # router: bf16 gate GEMM, replicated on every rank
    _, gemm_path = newest_table(system, "gemm", backend, "gemm_perf.parquet")
    bf16 = gemm_table(gemm_path, GEMM_DTYPES["bf16"], envelope=envelope)
    router = _gemm_ops(bf16, model, tp, {"moe_router": (x.num_experts, model.embedding_dim)})
    if router_gate_fp32(model):  # vLLM keeps this model's gate in fp32
        n_r, t_r = router["moe_router"]
        e, ne = model.embedding_dim, x.num_experts
        router["moe_router"] = (n_r, fp32_router_ms(device, n_r, e, ne, t_r))
        prov["router"] = "fp32 gate: cast + FP32 GEMM roofline, not below the bf16 table"
    parts.update(router)
    if x.num_shared_experts:
        hs = -(-x.num_shared_experts * x.shared_expert_dim // tp)
        e = model.embedding_dim
        sh = _gemm_ops(table, model, tp, {"up": (2 * hs, e), "down": (e, hs)})
        n_up, t_up = sh["up"]
        n_dn, t_dn = sh["down"]
        act = (3 * hs * BF16_BYTES * TOKEN_COUNTS) / mem_bps * 1e3 + mem_const_ms
        t_sh = np.interp(TOKEN_COUNTS, n_up, t_up) + np.interp(TOKEN_COUNTS, n_dn, t_dn) + act
        if backend == "vllm":  # a second CUDA stream beside the routed experts
            n_ex, t_ex = parts["moe_experts"]
            t_sh = overlap_shared(TOKEN_COUNTS, t_sh, np.interp(TOKEN_COUNTS, n_ex, t_ex))
            prov["shared_overlap_max_tokens"] = SHARED_STREAM_MAX_TOKENS
        parts["moe_shared"] = (TOKEN_COUNTS, t_sh)
    if dp > 1:
        e = float(model.embedding_dim)
        for op, coll in (("moe_dispatch", "all_gather"), ("moe_combine", "reduce_scatter")):
            v, xp, fp = nccl_curve(system, coll, dp)
            versions[f"nccl_{coll}"] = v
            parts[op] = (TOKEN_COUNTS, interp_loglog(TOKEN_COUNTS * dp * e, xp, fp, 1.0))
            prov[op] = f"nccl {coll} over {dp} GPUs"
    return prov


# ---- assembly ----


def system_for(device: DeviceSpec, profile_dir=None) -> AicSystem:
    if device.aiconfigurator_system is None:
        have = set(list_systems(profile_dir))
        devs = [d for d in list_devices() if get_device(d).aiconfigurator_system in have]
        raise profile_error(
            SOURCE,
            f"device {device.name} has no aiconfigurator system; devices with data: {join(devs)} "
            "(use predictor.source=roofline or vidur)",
        )
    return get_system(device.aiconfigurator_system, profile_dir)


def _package_label(profile_dir) -> str:
    if profile_dir is not None:
        return "profile_dir"
    try:
        return f"{PACKAGE} {metadata.version(PACKAGE.replace('_', '-'))}"
    except metadata.PackageNotFoundError:
        return PACKAGE


def load(
    model: ModelSpec,
    device: DeviceSpec,
    node: NodeSpec,
    tp: int,
    pp: int,
    *,
    profile_dir=None,
    backend: str = "vllm",
    precision: str = "bf16",
    kv_cache_dtype: str = "bf16",
    kernel_envelope: bool = True,
    moe_ep: int = 1,
    attention_dp: int = 1,
    moe_routing: str = "power_law_1.2",
    moe_kernel: str = "",
    decode_attention_kv_dtype: str = "",
    allreduce_rms_fusion: bool = False,
) -> OperatorSamples:
    """Samples for one model/device/node/TP/PP from the aiconfigurator database.

    kernel_envelope: use the fastest-kernel envelope of the GEMM table (_aic_gemm) and of the
    all-reduce curve (allreduce_curve). moe_ep, attention_dp, moe_routing: the expert split and
    routing skew of a MoE model (_aic_moe; ignored for dense models)."""
    system = system_for(device, profile_dir)
    if backend not in BACKENDS:
        raise profile_error(SOURCE, f"unknown backend {backend!r}; available: {join(BACKENDS)}")
    if precision not in GEMM_DTYPES:
        raise profile_error(
            SOURCE, f"unknown precision {precision!r}; available: {join(GEMM_DTYPES)}"
        )
    kvb = kv_bytes_of(SOURCE, kv_cache_dtype)
    versions, files = {}, []

    # token ops: measured GEMMs (interpolated to the model's shapes) + memory-bound ops
    versions["gemm"], gemm_path = newest_table(system, "gemm", backend, "gemm_perf.parquet")
    table = gemm_table(gemm_path, GEMM_DTYPES[precision], envelope=kernel_envelope)
    files.append(gemm_path)
    mem_bps = system.gpu("mem_bw") * system.gpu("mem_bw_empirical_scaling_factor")
    mem_const_ms = system.gpu("mem_empirical_constant_latency") * 1e3
    parts = _gemm_ops(table, model, tp)
    block_rule = None
    if precision == "fp8_block":
        parts, block_rule = _block_fp8_floor(parts, gemm_path, model, tp, kernel_envelope)
    parts.update(memory_bound_token_ops(model, tp, TOKEN_COUNTS, mem_bps, mem_const_ms, kvb))
    moe_prov = {}
    if model.moe is not None:
        moe_prov = _moe_ops(
            parts, system, backend, device, model, tp, attention_dp, moe_ep, moe_routing,
            precision, table, mem_bps, mem_const_ms, kernel_envelope, versions, files, moe_kernel,
        )  # fmt: skip
    if tp > 1 and qk_norm_spans_heads(model):
        # two all-reduces of one fp32 variance per token (2 bf16-sized elements)
        xq, fq, _, _ = allreduce_curve(system, backend, tp, kernel_envelope)
        parts["attn_qk_norm_allreduce"] = (
            TOKEN_COUNTS, 2 * interp_loglog(TOKEN_COUNTS * 2.0, xq, fq, above_exponent=1.0)
        )  # fmt: skip
    fusion = fuse_allreduce_rms(parts, model, tp) if allreduce_rms_fusion and tp > 1 else None
    token_ops = token_ops_frame(parts)

    # attention
    window = sliding_window_share(model)
    mla_prov = None
    decode_kv = kv_cache_dtype  # the MLA module's tables are keyed by the cache's own dtype
    if model.mla is not None:  # the measured MLA module replaces projections and attention
        prefill, decode, mla_prov, mla_files = mla_attention(
            system, backend, model, tp, precision, kv_cache_dtype
        )
        files += mla_files
        versions["mla"] = mla_prov["tables"]
        for op in ("attn_pre_proj", "attn_post_proj", "attn_rope", "attn_kv_cache_save"):
            parts.pop(op, None)
        token_ops = token_ops_frame(parts)
    else:
        q, kvh, d = model.q_heads_per_worker(tp), model.kv_heads_per_worker(tp), model.head_dim
        versions["attention"], ctx_path = newest_table(
            system, "attention", backend, "context_attention_perf.parquet"
        )
        gen_path = ctx_path.with_name("generation_attention_perf.parquet")
        if not gen_path.is_file():
            raise profile_error(SOURCE, f"missing {gen_path}")
        files += [ctx_path, gen_path]
        ctx_rows = attention_rows(ctx_path, context=True, kv_cache_dtype=kv_cache_dtype)
        ctx_match = match_heads(ctx_rows, q, kvh, d)
        isl, t_full = full_prefill_curve(ctx_rows, ctx_match)
        kv, chunk = np.meshgrid(PREFILL_KV, np.union1d(PREFILL_CHUNKS, isl), indexing="ij")
        kv, chunk = kv.ravel(), chunk.ravel()
        decode_kv = decode_attention_kv_dtype or kv_cache_dtype
        if decode_kv not in ATTN_KV_DTYPES:
            raise profile_error(
                SOURCE, f"unknown decode attention KV dtype {decode_kv!r}; available: "
                f"{join(ATTN_KV_DTYPES)}"
            )  # fmt: skip
        gen_rows = attention_rows(gen_path, context=False, kv_cache_dtype=decode_kv)
        gen_match = match_heads(gen_rows, q, kvh, d)
        decode, filled = decode_samples(gen_rows, gen_match)
        floor = np.maximum(
            kv_read_floor_ms(kv, chunk, q, kvh, d, mem_bps, mem_const_ms, kvb),
            single_decode_floor_ms(decode, kv, chunk),
        )
        t_pre = derive_prefill(isl, t_full, kv, chunk, floor)
        window = sliding_window_share(model)
        if window is not None:  # mean layer of full and sliding-window attention
            w, share = window
            kv_w = np.minimum(kv, w)
            floor_w = np.maximum(
                kv_read_floor_ms(kv_w, chunk, q, kvh, d, mem_bps, mem_const_ms, kvb),
                single_decode_floor_ms(decode, kv_w, np.minimum(chunk, w)),
            )
            t_win = interp_loglog(
                equivalent_chunk_pairs(window_pairs(kv, chunk, w)), isl, t_full, above_exponent=2.0
            )
            t_win = np.where(kv > 0, np.maximum(t_win, floor_w), t_win)
            t_pre = (1 - share) * t_pre + share * t_win
            decode = window_decode(decode, w, share)
        prefill = frame(PREFILL_COLUMNS, kv, chunk, t_pre)

    # collectives
    e = model.embedding_dim
    all_reduce = empty_frame(COMM_COLUMNS)
    if tp > 1:
        xp, fp, comm_versions, comm_files = allreduce_curve(system, backend, tp, kernel_envelope)
        versions.update(comm_versions)
        files += comm_files
        t = interp_loglog(TOKEN_COUNTS * float(e), xp, fp, above_exponent=1.0)
        all_reduce = frame(COMM_COLUMNS, TOKEN_COUNTS, t)
    send_recv = empty_frame(COMM_COLUMNS)
    inter_node = tp * pp > node.gpus_per_node
    if pp > 1:
        bw = system.node("inter_node_bw" if inter_node else "intra_node_bw")
        t = (system.node("p2p_latency") + TOKEN_COUNTS * e * BF16_BYTES / bw) * 1e3
        send_recv = frame(COMM_COLUMNS, TOKEN_COUNTS, t)

    data_root = system.data_dir.parent
    digests = {str(p.relative_to(data_root)): file_digest(p) for p in files}
    digests[system.yaml_path.name] = file_digest(system.yaml_path)
    provenance = {
        "source": SOURCE,
        "package": _package_label(profile_dir),
        "system": system.name,
        "backend": backend,
        "precision": precision,
        "kernel_envelope": kernel_envelope,
        **kv_provenance(kv_cache_dtype),
        **({"decode_attention_kv_dtype": decode_kv} if decode_kv != kv_cache_dtype else {}),
        "versions": versions,
        "files": digests,
        "model": model.name,
        "device": device.name,
        "node": node.name,
        "tp": tp,
        "pp": pp,
        "prefill_heads": ctx_match.describe() if mla_prov is None else "mla module",
        "decode_heads": gen_match.describe() if mla_prov is None else "mla module",
        "decode_filled_cells": filled if mla_prov is None else mla_prov["decode_filled_cells"],
        "gemm_measured_max_m": int(table.m[-1]),
        "send_recv_link": ("inter_node" if inter_node else "intra_node") if pp > 1 else None,
        "max_tokens": MAX_TOKENS,
    }
    if model.moe is not None:
        provenance["moe"] = moe_prov
        provenance["layer_weights"] = layer_weights(model)
    if fusion is not None:
        provenance["allreduce_rms_fusion"] = fusion
    if block_rule is not None:
        provenance["fp8_block_gemm"] = block_rule
    if mla_prov is not None:
        provenance["mla"] = mla_prov
    if window is not None:
        provenance["sliding_window"] = {"window": window[0], "layer_share": window[1]}
    return OperatorSamples(SOURCE, token_ops, decode, prefill, all_reduce, send_recv, provenance)


def available(profile_dir=None) -> dict:
    """Systems with data, which catalog devices use them, and per family the backends and
    versions present."""
    root = systems_root(profile_dir)
    systems = {}
    for name in list_systems(profile_dir):
        system = get_system(name, profile_dir)
        fams = {}
        for fam, table in (
            ("gemm", "gemm_perf.parquet"),
            ("attention", "context_attention_perf.parquet"),
            ("comm", "custom_allreduce_perf.parquet"),
        ):
            fams[fam] = {
                b: table_versions(system, fam, b, table) for b in backends_with(system, fam, table)
            }
        fams["nccl"] = table_versions(system, "comm", "nccl", "nccl_perf.parquet")
        systems[name] = fams
    devices = {
        d: get_device(d).aiconfigurator_system
        for d in list_devices()
        if get_device(d).aiconfigurator_system in systems
    }
    return {
        "root": str(root),
        "package": _package_label(profile_dir),
        "systems": systems,
        "devices": devices,
    }
