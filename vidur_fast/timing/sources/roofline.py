"""Analytic operator samples from DeviceSpec / NodeSpec, for devices nobody measured.

Every operator is max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth) + a fixed kernel
overhead; collectives are latency + bytes / achievable link bandwidth. The efficiency factors
below are round, documented numbers, not fits (bench/bench_roofline_error.py reports how far
they land from the aiconfigurator measurements).
"""

from dataclasses import dataclass

import numpy as np

from vidur_fast.catalog import DeviceSpec, ModelSpec, NodeSpec, get_device, list_devices, list_nodes
from vidur_fast.catalog.arch import (
    SLIDING,
    attention_kinds,
    expert_format,
    moe_parallel,
    router_gate_fp32,
)
from vidur_fast.timing.samples import OperatorSamples
from vidur_fast.timing.sources._aic_moe import (
    EXPERT_DTYPES,
    fp32_router_ms,
    layer_weights,
    model_roofline_ms,
    overlap_shared,
)
from vidur_fast.timing.sources._common import (
    BF16_BYTES,
    COMM_COLUMNS,
    DECODE_BATCHES,
    DECODE_COLUMNS,
    DECODE_KV,
    PRECISIONS,
    PREFILL_CHUNKS,
    PREFILL_COLUMNS,
    PREFILL_KV,
    TOKEN_COUNTS,
    empty_frame,
    frame,
    join,
    kv_bytes_of,
    kv_provenance,
    linear_shapes,
    memory_bound_token_ops,
    profile_error,
    token_ops_frame,
)

SOURCE = "roofline"

GEMM_FLOP_EFFICIENCY = 0.8  # cuBLAS/CUTLASS reach ~80-85 % of dense peak on large GEMMs
ATTENTION_FLOP_EFFICIENCY = 0.6  # FlashAttention-2/3 forward passes reach ~50-70 %
MEMORY_EFFICIENCY = 0.8  # streaming kernels reach ~80 % of the HBM datasheet bandwidth
LINK_EFFICIENCY = 0.8  # collectives reach ~80 % of the per-GPU link bandwidth
KERNEL_OVERHEAD_MS = 0.003  # launch + tail of one kernel under CUDA graphs
ATTENTION_OVERHEAD_MS = 0.010  # attention kernels also build split-KV / scheduling metadata


@dataclass(frozen=True)
class Roofline:
    """Achievable throughputs of one device (FLOP/s and bytes/s, efficiencies applied)."""

    gemm_flops: float
    attention_flops: float
    mem_bps: float
    gemm_input_bytes: int  # bytes per GEMM input element (2 bf16, 1 fp8); outputs stay bf16

    @classmethod
    def of(cls, device: DeviceSpec, precision: str = "bf16") -> "Roofline":
        if precision not in PRECISIONS:
            raise profile_error(
                SOURCE, f"unknown precision {precision!r}; available: {join(PRECISIONS)}"
            )
        peak = device.peak_fp8_tflops if precision == "fp8" else device.peak_bf16_tflops
        if peak <= 0 or device.peak_bf16_tflops <= 0 or device.hbm_bandwidth_gbps <= 0:
            raise profile_error(
                SOURCE, f"device {device.name} has no {precision} peak FLOP/s or HBM bandwidth"
            )
        return cls(
            gemm_flops=peak * 1e12 * GEMM_FLOP_EFFICIENCY,
            attention_flops=device.peak_bf16_tflops * 1e12 * ATTENTION_FLOP_EFFICIENCY,
            mem_bps=device.hbm_bandwidth_gbps * 1e9 * MEMORY_EFFICIENCY,
            gemm_input_bytes=1 if precision == "fp8" else 2,
        )


# ---- compute ----


def gemm_ms(rf: Roofline, m, n: int, k: int) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    flops = 2.0 * m * n * k
    nbytes = (m * k + k * n) * rf.gemm_input_bytes + m * n * BF16_BYTES
    return np.maximum(flops / rf.gemm_flops, nbytes / rf.mem_bps) * 1e3 + KERNEL_OVERHEAD_MS


def prefill_ms(
    rf: Roofline, kv, chunk, q: int, kvh: int, d: int, kv_bytes: int = BF16_BYTES
) -> np.ndarray:
    """One request's causal prefill of `chunk` new tokens over `kv` cached ones."""
    kv = np.asarray(kv, dtype=np.float64)
    c = np.asarray(chunk, dtype=np.float64)
    pairs = c * kv + c * (c + 1) / 2
    flops = 4.0 * q * d * pairs  # QK^T and PV, 2 FLOPs per multiply-add
    nbytes = (kv + c) * 2 * kvh * d * kv_bytes + 2 * c * q * d * BF16_BYTES
    t = np.maximum(flops / rf.attention_flops, nbytes / rf.mem_bps)
    return t * 1e3 + ATTENTION_OVERHEAD_MS


def decode_ms(
    rf: Roofline, batch, kv, q: int, kvh: int, d: int, kv_bytes: int = BF16_BYTES
) -> np.ndarray:
    """One new token for each of `batch` requests, each attending to kv + 1 positions."""
    b = np.asarray(batch, dtype=np.float64)
    pos = np.asarray(kv, dtype=np.float64) + 1
    flops = 4.0 * b * q * d * pos
    nbytes = b * pos * 2 * kvh * d * kv_bytes + 2 * b * q * d * BF16_BYTES
    t = np.maximum(flops / rf.attention_flops, nbytes / rf.mem_bps)
    return t * 1e3 + ATTENTION_OVERHEAD_MS


# ---- communication ----


def _link_bps(node: NodeSpec, span: int, crosses_pairs: bool) -> float:
    """Per-GPU one-way bandwidth for traffic among `span` GPUs: inter-node if they do not fit
    in one node; PCIe if the node only has NVLink bridges within pairs and traffic leaves the
    pair; NVLink otherwise."""
    if span > node.gpus_per_node:
        gbps = node.inter_node_bandwidth_gbps
    elif node.pairwise_nvlink and crosses_pairs:
        gbps = node.pcie_bandwidth_gbps
    else:
        gbps = node.nvlink_bandwidth_gbps
    return gbps * 1e9 * LINK_EFFICIENCY


def allreduce_ms(node: NodeSpec, tp: int, nbytes) -> np.ndarray:
    """Ring all-reduce: each GPU sends and receives 2 (tp-1)/tp of the message; two latency
    terms (reduce-scatter then all-gather)."""
    bps = _link_bps(node, tp, crosses_pairs=tp > 2)
    t = 2 * node.p2p_latency_us * 1e-6 + 2 * (tp - 1) / tp * np.asarray(nbytes) / bps
    return t * 1e3


def send_recv_ms(node: NodeSpec, tp: int, pp: int, nbytes) -> np.ndarray:
    """Activation hand-off between pipeline stages (stage i's rank r to stage i+1's rank r)."""
    bps = _link_bps(node, tp * pp, crosses_pairs=tp > 1)
    return (node.p2p_latency_us * 1e-6 + np.asarray(nbytes) / bps) * 1e3


# ---- assembly ----


def load(
    model: ModelSpec,
    device: DeviceSpec,
    node: NodeSpec,
    tp: int,
    pp: int,
    *,
    precision: str = "bf16",
    kv_cache_dtype: str = "bf16",
    moe_ep: int = 1,
    attention_dp: int = 1,
    moe_routing: str = "power_law_1.2",
) -> OperatorSamples:
    """Analytic samples on the standard grids (tokens, decode and prefill up to 128K).

    MoE layers: the expert kernel's roofline (_aic_moe.expert_roofline_ms, balanced routing:
    moe_routing is not modelled here), the router and shared experts as GEMMs, and with
    attention_dp > 1 a ring all-gather / reduce-scatter of every DP rank's tokens. Sliding
    layers: decode over min(kv, window) cached tokens, prefill over min(kv, window) cached."""
    if model.mla is not None:
        raise profile_error(
            SOURCE,
            f"{model.name} uses multi-head latent attention (kv_lora_rank="
            f"{model.mla.kv_lora_rank}); MLA is timed from aiconfigurator's MLA module tables "
            "only (predictor.source=aiconfigurator)",
        )
    rf = Roofline.of(device, precision)
    kvb = kv_bytes_of(SOURCE, kv_cache_dtype)
    parts = {
        op: (TOKEN_COUNTS, gemm_ms(rf, TOKEN_COUNTS, n, k))
        for op, (n, k) in linear_shapes(model, tp).items()
    }
    parts.update(
        memory_bound_token_ops(model, tp, TOKEN_COUNTS, rf.mem_bps, KERNEL_OVERHEAD_MS, kvb)
    )
    q, kvh, d = model.q_heads_per_worker(tp), model.kv_heads_per_worker(tp), model.head_dim

    kv, chunk = (a.ravel() for a in np.meshgrid(PREFILL_KV, PREFILL_CHUNKS, indexing="ij"))
    t_pre = prefill_ms(rf, kv, chunk, q, kvh, d, kvb)
    b, kvd = (a.ravel() for a in np.meshgrid(DECODE_BATCHES, DECODE_KV, indexing="ij"))
    t_dec = decode_ms(rf, b, kvd, q, kvh, d, kvb)
    kinds = attention_kinds(model)
    share = kinds.count(SLIDING) / len(kinds)
    if share and model.sliding_window > 0:
        w = model.sliding_window
        t_pre = (1 - share) * t_pre + share * prefill_ms(
            rf, np.minimum(kv, w), chunk, q, kvh, d, kvb
        )
        t_dec = (1 - share) * t_dec + share * decode_ms(rf, b, np.minimum(kvd, w), q, kvh, d, kvb)
    prefill = frame(PREFILL_COLUMNS, kv, chunk, t_pre)
    decode = frame(DECODE_COLUMNS, b, kvd, t_dec)
    moe_prov = {}
    if model.moe is not None:
        moe_prov = _moe_parts(parts, rf, model, device, node, tp, attention_dp, moe_ep, precision)

    row_bytes = TOKEN_COUNTS * float(model.embedding_dim * BF16_BYTES)
    all_reduce = empty_frame(COMM_COLUMNS)
    if tp > 1:
        all_reduce = frame(COMM_COLUMNS, TOKEN_COUNTS, allreduce_ms(node, tp, row_bytes))
    send_recv = empty_frame(COMM_COLUMNS)
    if pp > 1:
        send_recv = frame(COMM_COLUMNS, TOKEN_COUNTS, send_recv_ms(node, tp, pp, row_bytes))

    provenance = {
        "source": SOURCE,
        "model": model.name,
        "device": device.name,
        "node": node.name,
        "tp": tp,
        "pp": pp,
        "precision": precision,
        **kv_provenance(kv_cache_dtype),
        "device_spec": [device.peak_bf16_tflops, device.peak_fp8_tflops, device.hbm_bandwidth_gbps],
        "node_spec": [
            node.gpus_per_node,
            node.nvlink_bandwidth_gbps,
            node.inter_node_bandwidth_gbps,
            node.pcie_bandwidth_gbps,
            node.pairwise_nvlink,
            node.p2p_latency_us,
        ],
        "efficiency": {
            "gemm_flops": GEMM_FLOP_EFFICIENCY,
            "attention_flops": ATTENTION_FLOP_EFFICIENCY,
            "memory": MEMORY_EFFICIENCY,
            "link": LINK_EFFICIENCY,
            "kernel_overhead_ms": KERNEL_OVERHEAD_MS,
            "attention_overhead_ms": ATTENTION_OVERHEAD_MS,
        },
    }
    if model.moe is not None:
        provenance["moe"] = moe_prov
        provenance["layer_weights"] = layer_weights(model)
    if share:
        provenance["sliding_window"] = {"window": model.sliding_window, "layer_share": share}
    return OperatorSamples(
        SOURCE, token_ops_frame(parts), decode, prefill, all_reduce, send_recv, provenance
    )


def _moe_parts(parts, rf, model, device, node, tp, dp, ep, precision) -> dict:
    """The MoE ops of one MoE layer (roofline). Mutates: parts."""
    par = moe_parallel(model, tp, dp, ep)
    x = model.moe
    dtype = EXPERT_DTYPES[expert_format(model, precision)]
    n = TOKEN_COUNTS
    e = model.embedding_dim
    parts["moe_experts"] = (n, model_roofline_ms(device, dtype, model, par, n * dp))
    t_router = gemm_ms(Roofline.of(device, "bf16"), n, x.num_experts, e)
    if router_gate_fp32(model):  # vLLM keeps this model's gate in fp32
        t_router = fp32_router_ms(device, n, e, x.num_experts, t_router)
    parts["moe_router"] = (n, t_router)
    if x.num_shared_experts:
        hs = -(-x.num_shared_experts * x.shared_expert_dim // tp)
        act = (3 * hs * BF16_BYTES * n) / rf.mem_bps * 1e3 + KERNEL_OVERHEAD_MS
        t_sh = gemm_ms(rf, n, 2 * hs, e) + gemm_ms(rf, n, e, hs) + act
        parts["moe_shared"] = (n, overlap_shared(n, t_sh, parts["moe_experts"][1]))
    if dp > 1:  # a ring all-gather (reduce-scatter) moves half of a ring all-reduce's bytes
        gathered = n * dp * float(e * BF16_BYTES)
        half = allreduce_ms(node, dp, gathered) / 2
        parts["moe_dispatch"] = (n, half)
        parts["moe_combine"] = (n, half)
    prov = {
        "moe_tp": par.moe_tp, "moe_ep": par.moe_ep, "attention_dp": dp, "moe_dtype": dtype,
        "distribution": "balanced", "rule": "roofline",
    }  # fmt: skip
    if router_gate_fp32(model):
        prov["router"] = "fp32 gate: cast + FP32 GEMM roofline"
    if dp > 1:
        prov["moe_dispatch"] = f"ring all-gather over {dp} GPUs (roofline)"
        prov["moe_combine"] = f"ring reduce-scatter over {dp} GPUs (roofline)"
    return prov


def available() -> dict:
    """Catalog devices with the specs a roofline needs, and the catalog nodes."""
    devices = {}
    for name in list_devices():
        dev = get_device(name)
        if dev.peak_bf16_tflops > 0 and dev.hbm_bandwidth_gbps > 0:
            devices[name] = ["bf16", "fp8"] if dev.peak_fp8_tflops > 0 else ["bf16"]
    return {"devices": devices, "nodes": list_nodes()}
