"""Multi-head latent attention (DeepSeek-V3 / Kimi-K2.x) from aiconfigurator's measured MLA
module tables (`mla/<backend>/<version>/mla_{context,generation}_module_perf.parquet`).

The tables time vLLM's whole MLA attention module of one layer (query and latent KV
projections, rotary, cache write, attention, output projection) at local head counts
1..128 for DeepSeek-V3's latent shape (kv_lora_rank 512, q_lora_rank 1536, rope 64, nope
128, v 128): a prefill of `isl` tokens of one request (context module) and a decode step of
`batch` requests over `step` cached tokens (generation module). The projections are
therefore not token operators for an MLA model; the prefill grid is the context module
(chunks over a cached prefix by the equal-attended-pairs rule, with the decode of one request
over the same positions as a floor) and the decode grid the generation module.
"""

import numpy as np
import pandas as pd

from vidur_fast.catalog import ModelSpec
from vidur_fast.timing.sources._aic_data import (
    SOURCE,
    AicSystem,
    newest_table,
    pick_fastest_kernel,
    read_table,
)
from vidur_fast.timing.sources._common import (
    DECODE_COLUMNS,
    PREFILL_CHUNKS,
    PREFILL_COLUMNS,
    PREFILL_KV,
    frame,
    join,
    profile_error,
)

# the latent shape the tables measure (DeepSeek-V3's, which Kimi-K2.x shares)
MEASURED_SHAPE = {
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128, "v_head_dim": 128, "hidden": 7168,
}  # fmt: skip
# attention GEMM precision -> gemm_type of the module tables
GEMM_TYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8_block": "fp8_block"}
KV_TYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
COLS = ("num_heads", "batch_size", "isl", "step", "gemm_type", "kv_cache_dtype", "latency")


def _check_shape(model: ModelSpec) -> None:
    a = model.mla
    got = {
        "kv_lora_rank": a.kv_lora_rank, "q_lora_rank": a.q_lora_rank,
        "qk_rope_head_dim": a.qk_rope_head_dim, "qk_nope_head_dim": a.qk_nope_head_dim,
        "v_head_dim": a.v_head_dim, "hidden": model.embedding_dim,
    }  # fmt: skip
    bad = [f"{k}={v} (measured {m})" for k, v in got.items() if v != (m := MEASURED_SHAPE[k])]
    if bad:
        raise profile_error(
            SOURCE, f"{model.name}: the MLA module tables measure DeepSeek-V3's shape only; "
            f"{', '.join(bad)}"
        )  # fmt: skip


def _rows(path, gemm: str, kv: str, heads: int) -> tuple[pd.DataFrame, int]:
    df = read_table(path, COLS, ("kernel_source",))
    sel = df[(df.gemm_type == gemm) & (df.kv_cache_dtype == kv)]
    if sel.empty:
        raise profile_error(
            SOURCE, f"{path} has no rows with gemm_type {gemm} and kv_cache_dtype {kv}; "
            f"gemm_type: {join(sorted(df.gemm_type.unique()))}"
        )  # fmt: skip
    have = np.sort(sel.num_heads.unique())
    if heads not in have:
        raise profile_error(
            SOURCE, f"{path}: no rows for {heads} local heads; measured: {join(have)}"
        )  # fmt: skip
    return sel[sel.num_heads == heads], heads


def mla_attention(
    system: AicSystem, backend: str, model: ModelSpec, tp: int, precision: str,
    kv_cache_dtype: str,
) -> tuple[pd.DataFrame, pd.DataFrame, dict, list]:  # fmt: skip
    """(prefill frame, decode frame, provenance, files) of one MLA layer on one GPU."""
    from vidur_fast.timing.sources.aiconfigurator import (
        _fill_linear,
        derive_prefill,
        single_decode_floor_ms,
    )

    _check_shape(model)
    gemm = GEMM_TYPES.get(precision)
    kvt = KV_TYPES.get(kv_cache_dtype)
    if gemm is None or kvt is None:
        raise profile_error(
            SOURCE, f"MLA module tables: no {precision} attention GEMMs / {kv_cache_dtype} KV "
            f"cache (GEMMs: {join(GEMM_TYPES)}; KV: {join(KV_TYPES)})"
        )  # fmt: skip
    heads = model.num_q_heads // tp
    version, ctx_path = newest_table(system, "mla", backend, "mla_context_module_perf.parquet")
    gen_path = ctx_path.with_name("mla_generation_module_perf.parquet")
    if not gen_path.is_file():
        raise profile_error(SOURCE, f"missing {gen_path}")
    ctx, _ = _rows(ctx_path, gemm, kvt, heads)
    ctx = pick_fastest_kernel(ctx[(ctx.batch_size == 1) & (ctx.step == 0)], ["isl"])
    ctx = ctx.sort_values("isl")
    isl = ctx.isl.to_numpy(dtype=np.int64)
    t_full = np.maximum.accumulate(ctx.latency.to_numpy(dtype=np.float64))
    gen, _ = _rows(gen_path, gemm, kvt, heads)
    gen = pick_fastest_kernel(gen[gen.isl == 1], ["batch_size", "step"])
    grid = gen.pivot(index="batch_size", columns="step", values="latency").sort_index()
    grid = grid.reindex(columns=np.sort(grid.columns))
    t = grid.to_numpy(copy=True)
    missing = ~np.isfinite(t)
    _fill_linear(t, grid.index.to_numpy(dtype=np.float64))
    _fill_linear(t.T, grid.columns.to_numpy(dtype=np.float64) + 1)
    b, kvs = np.meshgrid(grid.index.to_numpy(), grid.columns.to_numpy(), indexing="ij")
    ok = np.isfinite(t)
    decode = frame(DECODE_COLUMNS, b[ok], kvs[ok], t[ok])
    kv, chunk = np.meshgrid(PREFILL_KV, np.union1d(PREFILL_CHUNKS, isl), indexing="ij")
    kv, chunk = kv.ravel(), chunk.ravel()
    floor = single_decode_floor_ms(decode, kv, chunk)
    prefill = frame(PREFILL_COLUMNS, kv, chunk, derive_prefill(isl, t_full, kv, chunk, floor))
    prov = {
        "tables": f"{backend}/{version}",
        "local_heads": heads,
        "gemm_type": gemm,
        "kv_cache_dtype": kvt,
        "decode_filled_cells": int((missing & ok).sum()),
        "rule": "whole MLA module per layer (projections included)",
    }
    return prefill, decode, prov, [ctx_path, gen_path]
