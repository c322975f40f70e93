"""Mixture-of-experts layers from aiconfigurator's measured tables (and a roofline where a
device has none).

A MoE layer on one GPU is timed as the sum of
    attention part          as for a dense layer (the caller's token ops and attention grids)
    moe_router              the gate GEMM, tokens x hidden -> experts, bf16, replicated (fp32
                            with the cast before it for MiniMax-M2, whose vLLM code keeps it so)
    moe_experts             the fused expert kernel of the backend's `moe_perf` table, looked up
                            at the tokens of every attention-DP rank (they share the experts),
                            for the model's (hidden, expert width, top-k, experts), moe_tp,
                            moe_ep, expert dtype and routing distribution
    moe_shared              shared experts as dense GEMMs (split over TP) and their activation;
                            for batches of up to SHARED_STREAM_MAX_TOKENS tokens vLLM runs
                            them on a second CUDA stream beside the routed experts, so only
                            their excess over the routed experts' time remains
    moe_dispatch/combine    with attention DP > 1: NCCL all-gather of the DP ranks' tokens
                            before the experts and reduce-scatter of their outputs after; with
                            one DP rank every TP rank already holds all tokens and the layer's
                            TP all-reduce combines the experts' partial outputs
A shape the table lacks takes the nearest measured one (log distance over hidden size, per-GPU
expert width, per-GPU top-k and local experts) scaled by the ratio of the two shapes' roofline
times at each token count, not below the latency floor of the kernels (the fastest latency any
of their measured configurations reached on the GPU); the match is recorded in the provenance.
"""

import numpy as np
import pandas as pd

from vidur_fast.catalog import DeviceSpec, ModelSpec
from vidur_fast.catalog.arch import DENSE, MOE, MoEParallel, mlp_kinds, weight_format_bytes
from vidur_fast.numerics import portable_math as pm
from vidur_fast.timing.sources._aic_data import (
    SOURCE,
    AicSystem,
    pick_fastest_kernel,
    read_table,
    table_versions,
)
from vidur_fast.timing.sources._common import BF16_BYTES, interp_loglog, join, profile_error

MOE_TABLE = "moe_perf.parquet"
MOE_OPS = ("moe_router", "moe_experts", "moe_shared", "moe_dispatch", "moe_combine")
# expert weight format (checkpoint quantization or predictor.precision) -> moe_dtype of the
# measured kernels: gpt-oss's MXFP4 experts run vLLM's w4a16 MXFP4 kernel on Hopper and
# Blackwell, int4 weight-only checkpoints (Kimi-K2.x) the Marlin WNA16 kernel
EXPERT_DTYPES = {
    "bf16": "bfloat16",
    "fp16": "bfloat16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "mxfp4": "w4a16_mxfp4",
    "nvfp4": "nvfp4",
    "int4_wo": "int4_wo",
}
# bytes per stored expert weight (scales included; int4 in its default scale group) and the
# tensor-core peak each runs at
WEIGHT_BYTES = {dtype: weight_format_bytes(fmt) for fmt, dtype in EXPERT_DTYPES.items()}
PEAK = {
    "bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "w4a16_mxfp4": "bf16",
    "nvfp4": "fp4", "int4_wo": "bf16",
}  # fmt: skip
ROOF_FLOP_EFF, ROOF_MEM_EFF, ROOF_KERNEL_MS = 0.8, 0.8, 0.003
KEYS = ("hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size")
# vLLM runs the shared experts of a MoE layer on an auxiliary CUDA stream, concurrently with the
# routed experts, for batches of at most VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD tokens (256
# by default; vllm-project/vllm PRs 26440, 28406 and 30085, on CUDA since vLLM 0.12)
SHARED_STREAM_MAX_TOKENS = 256


def layer_weights(model: ModelSpec) -> dict[str, float]:
    """Share of the layers each MLP-side op runs in (the grids hold one mean layer): the dense
    MLP ops in the dense layers, the MoE ops in the MoE layers."""
    kinds = mlp_kinds(model)
    n = len(kinds)
    dense = kinds.count(DENSE) / n
    moe = kinds.count(MOE) / n
    out = {op: dense for op in ("mlp_up_proj", "mlp_down_proj", "mlp_act")}
    out.update({op: moe for op in MOE_OPS})
    return out


# ---- roofline of one expert kernel call ----


def peak_flops(device: DeviceSpec, dtype: str) -> float:
    kind = PEAK[dtype]
    if kind == "bf16":
        return device.peak_bf16_tflops * 1e12
    if device.peak_fp8_tflops <= 0:
        raise profile_error(SOURCE, f"{device.name} has no fp8 tensor cores for {dtype} experts")
    return device.peak_fp8_tflops * 1e12 * (2 if kind == "fp4" else 1)


def expert_roofline_ms(
    device: DeviceSpec,
    dtype: str,
    tokens,
    hidden: int,
    local_inter: float,
    pairs_per_token: float,
    local_experts: float,
) -> np.ndarray:
    """max(FLOPs / peak, bytes / HBM) of one GPU's fused expert kernel at `tokens` tokens:
    each token goes through pairs_per_token local experts (gate+up and down GEMMs of
    local_inter width); the weights of the local experts that receive a token are read once
    (expected count with uniform routing), activations in and out in bf16."""
    n = np.asarray(tokens, dtype=np.float64)
    pairs = n * pairs_per_token
    touched = local_experts * (1.0 - pm.power(1.0 - 1.0 / local_experts, pairs))
    flops = 2.0 * pairs * 3 * hidden * local_inter
    nbytes = touched * 3 * hidden * local_inter * WEIGHT_BYTES[dtype]
    nbytes = nbytes + 2 * n * hidden * BF16_BYTES + 2 * pairs * hidden * BF16_BYTES
    bw = device.hbm_bandwidth_gbps * 1e9
    compute = flops / (peak_flops(device, dtype) * ROOF_FLOP_EFF)
    t = np.maximum(compute, nbytes / (bw * ROOF_MEM_EFF))
    return t * 1e3 + 2 * ROOF_KERNEL_MS


def _shape_terms(h, inter, topk, experts, mtp, mep) -> tuple[float, float, float, float]:
    return float(h), inter / mtp, topk / mep, experts / mep


def _round_up(x: float, m: int) -> int:
    return -(-int(np.ceil(x)) // m) * m


def marlin_mxfp4_terms(h, inter, topk, experts, mtp, mep) -> tuple[float, float, float, float]:
    """_shape_terms of vLLM's Marlin MXFP4 MoE path, which stores each expert padded to the
    Marlin kernel's tile multiples (`Mxfp4MoEMethod.create_weights`: gate/up `n % 256` and
    `k % 128`, so the hidden size rounds up to 256 and the per-GPU expert width to 128) and
    computes over the padding: gpt-oss's 2880 x 720 expert slice at moe_tp 4 runs as 3072 x 768."""
    h_pad, w_pad = _round_up(h, 256), _round_up(inter / mtp, 128)
    return float(h_pad), float(w_pad), topk / mep, experts / mep


def model_roofline_ms(device, dtype, model: ModelSpec, par: MoEParallel, tokens) -> np.ndarray:
    x = model.moe
    terms = _shape_terms(
        model.embedding_dim, x.expert_dim, x.top_k, x.num_experts, par.moe_tp, par.moe_ep
    )
    return expert_roofline_ms(device, dtype, tokens, *terms)


# ---- measured tables ----


def moe_rows(system: AicSystem, backend: str) -> tuple[str | None, object, pd.DataFrame | None]:
    """(version, path, rows) of the newest moe_perf table of `backend` (None: none measured)."""
    versions = table_versions(system, "moe", backend, MOE_TABLE)
    if not versions:
        return None, None, None
    path = system.data_dir / "moe" / backend / versions[0] / MOE_TABLE
    cols = ("moe_dtype", "num_tokens", *KEYS, "distribution", "latency")
    return versions[0], path, read_table(path, cols, ("kernel_source",))


def expert_curve(
    rows: pd.DataFrame,
    device: DeviceSpec,
    model: ModelSpec,
    par: MoEParallel,
    fmt: str,
    routing: str,
    where: str,
    kernel: str = "",
) -> tuple[np.ndarray, np.ndarray, dict]:
    """(measured token counts, ms, provenance) of the model's fused expert kernel on one GPU:
    the exact measured shape, else the nearest one scaled by the roofline ratio; kernel: only
    measured kernels whose name contains it."""
    dtype = EXPERT_DTYPES.get(fmt)
    have = sorted(rows.moe_dtype.unique())
    if dtype is None or dtype not in have:
        raise profile_error(
            SOURCE,
            f"{where} has no MoE kernels for {fmt} experts of {model.name}; measured expert "
            f"dtypes: {join(have)}",
        )
    sel = rows[(rows.moe_dtype == dtype) & (rows.distribution == routing)]
    if sel.empty:
        raise profile_error(
            SOURCE,
            f"{where} has no {dtype} MoE rows with distribution {routing}; distributions: "
            f"{join(sorted(rows[rows.moe_dtype == dtype].distribution.unique()))}",
        )
    if kernel:
        names = sel.kernel_source.astype(str) if "kernel_source" in sel else None
        if names is None or not names.str.contains(kernel, regex=False).any():
            have_k = sorted(set(names)) if names is not None else []
            raise profile_error(
                SOURCE,
                f"{where} has no {dtype} MoE kernel named like {kernel!r} (predictor.moe_kernel);"
                f" kernels: {join(have_k)}",
            )
        sel = sel[names.str.contains(kernel, regex=False)]
    x = model.moe
    want = (model.embedding_dim, x.expert_dim, x.top_k, x.num_experts, par.moe_tp, par.moe_ep)
    combos = sel[list(KEYS)].drop_duplicates()
    target = pm.log(_shape_terms(*want))

    def dist(c) -> float:
        return float(np.abs(pm.log(_shape_terms(*c)) - target).sum())

    cands = [tuple(int(v) for v in c) for c in combos.itertuples(index=False)]
    exact = want in cands
    best = want if exact else min(cands, key=lambda c: (dist(c), [-v for v in c]))
    keep = np.ones(len(sel), dtype=bool)
    for k, v in zip(KEYS, best, strict=True):
        keep &= sel[k].to_numpy() == v
    curve = pick_fastest_kernel(sel[keep], ["num_tokens"]).sort_values("num_tokens")
    n = curve.num_tokens.to_numpy(dtype=np.int64)
    t = curve.latency.to_numpy(dtype=np.float64)
    floor_ms = None
    padded = False
    if not exact:
        terms = _shape_terms
        names = sel[keep].kernel_source.astype(str) if "kernel_source" in sel else None
        if dtype == "w4a16_mxfp4" and names is not None and names.str.contains("marlin").all():
            # the Marlin MXFP4 kernel runs both shapes at its tile multiples
            terms, padded = marlin_mxfp4_terms, True
        ratio = expert_roofline_ms(device, dtype, n, *terms(*want)) / expert_roofline_ms(
            device, dtype, n, *terms(*best)
        )
        # a smaller shape takes less time only down to the kernel's latency floor: the
        # fastest latency any measured configuration of these kernels reached on this GPU
        floor_ms = float(pick_fastest_kernel(sel, [*KEYS, "num_tokens"]).latency.min())
        t = np.maximum(t * ratio, floor_ms)
    prov = {
        "moe_dtype": dtype,
        "distribution": routing,
        "shape": dict(zip(KEYS, want, strict=True)),
        "measured_shape": dict(zip(KEYS, best, strict=True)),
        "exact": exact,
    }
    if kernel:
        prov["kernel"] = sorted(set(sel[keep].kernel_source.astype(str)))
    if not exact:
        prov["rule"] = (
            "nearest measured shape scaled by the roofline ratio, not below the kernels' "
            "latency floor"
        )
        prov["floor_ms"] = floor_ms
        if padded:
            h_pad, w_pad = marlin_mxfp4_terms(*want)[:2]
            prov["padded_shape"] = {"hidden_size": h_pad, "inter_size_per_gpu": w_pad}
    return n, t, prov


FP32_BYTES = 4


def fp32_router_ms(device: DeviceSpec, tokens, hidden: int, experts: int, bf16_ms) -> np.ndarray:
    """Router time of a model whose gate vLLM keeps in fp32 (`catalog.arch.router_gate_fp32`):
    the cast of the bf16 hidden states to fp32 (one memory-bound kernel: 2 bytes read and 4
    written per element) and the FP32 GEMM `tokens x hidden -> experts` on the CUDA cores (vLLM
    runs fp32 matmuls at `highest` precision, no TF32, by default): its roofline at the device's
    FP32 peak and fp32 bytes, not below the measured bf16 GEMM of the same shape (`bf16_ms`)."""
    if device.peak_fp32_tflops <= 0:
        raise profile_error(SOURCE, f"device {device.name} has no FP32 peak for the fp32 gate")
    n = np.asarray(tokens, dtype=np.float64)
    bw = device.hbm_bandwidth_gbps * 1e9 * ROOF_MEM_EFF
    flops = 2.0 * n * hidden * experts
    nbytes = (n * hidden + hidden * experts + n * experts) * FP32_BYTES
    gemm = np.maximum(flops / (device.peak_fp32_tflops * 1e12 * ROOF_FLOP_EFF), nbytes / bw)
    cast = n * hidden * (BF16_BYTES + FP32_BYTES) / bw
    gemm_ms = np.maximum(np.asarray(bf16_ms, dtype=np.float64), gemm * 1e3 + ROOF_KERNEL_MS)
    return gemm_ms + cast * 1e3 + ROOF_KERNEL_MS


def overlap_shared(tokens: np.ndarray, shared: np.ndarray, experts: np.ndarray) -> np.ndarray:
    """Shared-expert time that remains beside the routed experts: up to SHARED_STREAM_MAX_TOKENS
    tokens per rank the two run on separate streams, so the layer lasts max(shared, routed)
    and the shared op keeps only its excess; above, they run one after the other."""
    tokens = np.asarray(tokens, dtype=np.float64)
    hidden = np.maximum(np.asarray(shared) - np.asarray(experts), 0.0)
    return np.where(tokens <= SHARED_STREAM_MAX_TOKENS, hidden, shared)


def tokens_curve(n: np.ndarray, t: np.ndarray, tokens: np.ndarray, dp: int) -> np.ndarray:
    """Expert time at `tokens` per DP rank: every DP rank's tokens reach the experts, so the
    kernel runs at tokens x dp (log-log between measured counts, linear beyond the largest)."""
    return interp_loglog(np.asarray(tokens, dtype=np.float64) * dp, n, t, above_exponent=1.0)


def nccl_curve(system: AicSystem, op: str, gpus: int) -> tuple[str, np.ndarray, np.ndarray]:
    """(version, message elements, ms) of a half-precision NCCL collective on `gpus` GPUs."""
    versions = table_versions(system, "comm", "nccl", "nccl_perf.parquet")
    pinned = str((system.spec.get("misc") or {}).get("nccl_version", ""))
    measured = set()
    for v in sorted(versions, key=lambda v: v != pinned):
        path = system.data_dir / "comm" / "nccl" / v / "nccl_perf.parquet"
        df = read_table(path, ("op_name", "num_gpus", "message_size", "latency"), ("nccl_dtype",))
        rows = df[df.op_name == op]
        if "nccl_dtype" in rows:
            rows = rows[rows.nccl_dtype == "half"]
        measured |= set(rows.num_gpus.astype(int))
        rows = rows[rows.num_gpus == gpus]
        if not rows.empty:
            curve = rows.groupby("message_size", as_index=False).latency.median()
            return v, curve.message_size.to_numpy(), curve.latency.to_numpy()
    raise profile_error(
        SOURCE,
        f"no NCCL {op} measurements on {gpus} GPUs for {system.name} (attention DP "
        f"dispatch/combine); measured GPU counts: {join(sorted(measured))}",
    )
