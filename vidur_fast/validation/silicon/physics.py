"""Physics check of a measured benchmark: the work its throughput implies vs the device's peak.

In a closed loop of `c` clients each client completes one request per cycle of about
`TTFT + (osl - 1) x TPOT`, so the replica serves `R = c / cycle` requests per second. Each
request needs its full prompt prefilled (unless the engine finds it in its prefix cache):
`2 x (layer parameters) x isl` FLOPs in the linear layers plus `2 x isl^2 x q_dim` per layer in
causal attention (QK^T and PV, half the square each). The required prefill rate per GPU,
`R x FLOPs / (tp x pp)`, is compared with the dense tensor-core peak of the row's precision
(bf16, fp8; nvfp4 on Blackwell at twice fp8). A ratio above 1 cannot be reached by computing
every prompt: the engine must have reused cached prefixes, or the row means something else.

A tighter bound uses aiconfigurator's measured GEMM tables (vLLM kernels) of the device: the
prefill GEMMs of one request at the row's shapes take `t_gemm`, so the replica spends at least
`R x t_gemm` of every second on prefill GEMMs alone (attention, communication and decode steps
come on top). Above 1 the measured throughput is not reachable by computing every prompt.

Decode side: every decode step reads each GPU's weights once, so the mean TPOT cannot be below
`weight bytes per GPU / HBM bandwidth`. For mixture-of-experts rows only this side is checked
(`check_moe_row`), with the routed experts the step's tokens reach rather than all of them.
"""

import math
from dataclasses import dataclass

import numpy as np

from vidur_fast.catalog import get_device, get_model
from vidur_fast.catalog.arch import MOE, WEIGHT_FORMAT_BYTES, mlp_kinds, weight_format_bytes
from vidur_fast.errors import UserError
from vidur_fast.numerics import portable_math as pm

# bytes per stored weight by format, scales included (int4 in its default scale group)
WEIGHT_BYTES = {**WEIGHT_FORMAT_BYTES, "int4_wo": weight_format_bytes("int4_wo")}
# devices with FP4 tensor cores (dense FP4 peak = 2 x dense FP8 peak)
FP4_DEVICES = ("b200", "b300", "gb200", "gb300")
# prefill-utilisation above which a row is flagged (the prefill FLOPs exceed the dense peak)
PREFILL_LIMIT = 1.0


@dataclass(frozen=True)
class PhysicsCheck:
    prefill_tflops_per_gpu: float
    """Prefill FLOP rate per GPU the measured throughput implies (no prefix reuse)."""
    peak_tflops: float
    """Dense tensor-core peak of the row's precision."""
    prefill_util: float
    """prefill_tflops_per_gpu / peak_tflops."""
    gemm_util: float
    """Fraction of each second the replica needs for the prefill GEMMs alone, from the measured
    GEMM tables (NaN when the device has no table of the precision)."""
    tpot_floor_ms: float
    """Weight-read time of one decode step (HBM bound)."""
    flag: str
    """"" when physically possible, else what exceeds the device."""
    tpot_floor_bf16_kv_ms: float = math.nan
    """Weight read plus reading every sequence's KV cache in bf16 at its mean context
    (isl + osl / 2), the batch being `concurrency` sequences."""
    note: str = ""
    """What the row implies without being impossible (e.g. a KV cache narrower than bf16)."""


def peak_tflops(device: str, precision: str) -> float:
    d = get_device(device)
    if precision in ("fp8", "fp8_block", "int8"):
        return d.peak_fp8_tflops
    if precision in ("nvfp4", "mxfp4"):
        return 2 * d.peak_fp8_tflops if device in FP4_DEVICES else d.peak_fp8_tflops
    return d.peak_bf16_tflops


def prefill_flops(model: str, isl: int) -> float:
    m = get_model(model)
    linear = 2.0 * m.params_per_device(1, 1) * isl
    attention = 2.0 * isl * isl * m.q_dim * m.num_layers
    return linear + attention


GEMM_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block",
               "nvfp4": "nvfp4"}  # fmt: skip


def gemm_prefill_ms(model: str, device: str, precision: str, tp: int, pp: int, isl: int) -> float:
    """Measured-GEMM time (ms) of one prompt's linear layers on one pipeline stage; NaN when the
    device has no vLLM GEMM table of the precision."""
    from vidur_fast.timing.sources._aic_data import get_system, newest_table
    from vidur_fast.timing.sources._aic_gemm import gemm_table, interpolate_gemm

    dtype = GEMM_DTYPES.get(precision)
    system = get_device(device).aiconfigurator_system
    if dtype is None or system is None:
        return math.nan
    try:
        _, path = newest_table(get_system(system), "gemm", "vllm", "gemm_perf.parquet")
        table = gemm_table(path, dtype)
    except UserError:
        return math.nan
    m = get_model(model)
    hd, e = m.head_dim, m.embedding_dim
    q, kv = m.q_heads_per_worker(tp) * hd, m.kv_heads_per_worker(tp) * hd
    mlp = m.mlp_hidden_dim // tp
    shapes = [(q + 2 * kv, e), (e, q), ((2 if m.use_gated_mlp else 1) * mlp, e), (e, mlp)]
    logm = pm.log(table.m.astype(np.float64))
    total = 0.0
    for n, k in shapes:
        t = interpolate_gemm(table, n, k)
        ok = np.isfinite(t)
        if not ok.any():
            return math.nan
        x = math.log(isl)
        if x >= logm[ok][-1]:
            total += float(t[ok][-1]) * isl / float(table.m[ok][-1])
        else:
            total += math.exp(float(np.interp(x, logm[ok], pm.log(t[ok]))))
    return total * m.num_layers / pp


def check_row(model: str, device: str, precision: str, tp: int, pp: int, concurrency: int,
              isl: int, osl: int, ttft_ms: float, tpot_ms: float):  # fmt: skip
    """The PhysicsCheck of one row (None when the model or device is not in the catalog)."""
    try:
        m = get_model(model)
        peak = peak_tflops(device, precision)
        bw = get_device(device).hbm_bandwidth_gbps
    except UserError:
        return None
    cycle_s = (ttft_ms + max(osl - 1, 0) * tpot_ms) / 1e3
    rate = concurrency / cycle_s
    tflops = rate * prefill_flops(model, isl) / (tp * pp) / 1e12
    util = tflops / peak
    gemm_ms = gemm_prefill_ms(model, device, precision, tp, pp, isl)
    gemm_util = rate * gemm_ms / 1e3
    wbytes = m.params_per_device(tp, pp) * WEIGHT_BYTES.get(precision, 2.0)
    floor_ms = wbytes / (bw * 1e9) * 1e3
    flags = []
    if util > PREFILL_LIMIT:
        flags.append(f"prefill {tflops:.0f} TFLOP/s/GPU > {precision} peak {peak:.0f}")
    if gemm_util > 1.0:
        flags.append(f"prefill GEMMs need {gemm_util:.2f} s per s (measured {precision} GEMMs)")
    if tpot_ms < floor_ms:
        flags.append(f"TPOT {tpot_ms:.2f} ms < weight read {floor_ms:.2f} ms")
    kv_bytes = m.num_layers * 2 * m.kv_heads_per_worker(tp) * m.head_dim * 2.0 / pp
    kv_ms = concurrency * (isl + osl / 2) * kv_bytes / (bw * 1e9) * 1e3
    note = ""
    if not flags and tpot_ms < floor_ms + kv_ms:
        note = (
            f"TPOT {tpot_ms:.2f} ms < weight + bf16 KV read {floor_ms + kv_ms:.2f} ms at "
            f"{concurrency} sequences: fp8 KV cache or fewer sequences per step"
        )
    return PhysicsCheck(
        tflops, peak, util, gemm_util, floor_ms, "; ".join(flags), floor_ms + kv_ms, note
    )


def fmt_util(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}"


def moe_decode_floor_ms(model: str, device: str, precision: str, tp: int, attention_dp: int,
                        concurrency: int) -> float:  # fmt: skip
    """Weight-read time (ms) of one decode step of a MoE model on one GPU, every client in the
    batch: the attention, dense, shared-expert, router and norm weights of the TP rank and the
    LM head once, and of the routed experts (spread over the `tp x attention_dp` GPUs, as
    whole experts with expert parallelism or as slices of every expert) the share the step's
    tokens reach with uniform routing, `1 - (1 - top_k / experts)^concurrency`; each group in
    the format the checkpoint stores it in (`precision` for the rest), at the device's full
    HBM bandwidth. The embedding table is looked up, not read, and counts nothing."""
    m = get_model(model)
    x = m.moe
    groups = m.params_per_device_by_group(tp, 1, 1)
    rest = WEIGHT_BYTES.get(precision, 2.0)

    def nbytes(group: str) -> float:
        if m.quantization and group in m.quantized_groups:
            return WEIGHT_BYTES.get(m.quantization, 2.0)
        return rest

    total = sum(n * nbytes(g) for g, n in groups.items() if g not in ("experts", "embeddings"))
    if x is not None:
        gpus = tp * attention_dp
        moe_layers = mlp_kinds(m).count(MOE)
        all_experts = moe_layers * x.num_experts * 3 * m.embedding_dim * x.expert_dim / gpus
        reached = 1.0 - (1.0 - x.top_k / x.num_experts) ** max(concurrency, 1)
        total += reached * all_experts * nbytes("experts")
    return total / (get_device(device).hbm_bandwidth_gbps * 1e9) * 1e3


def check_moe_row(model: str, device: str, precision: str, tp: int, attention_dp: int,
                  concurrency: int, tpot_ms: float):  # fmt: skip
    """The decode side of the PhysicsCheck for a MoE row (the prefill side counts dense
    layers; None when the model or device is not in the catalog): the measured TPOT against
    `moe_decode_floor_ms` with every client in the step."""
    try:
        floor_ms = moe_decode_floor_ms(model, device, precision, tp, attention_dp, concurrency)
    except UserError:
        return None
    flag = ""
    if tpot_ms < floor_ms:
        flag = f"TPOT {tpot_ms:.2f} ms < weight read {floor_ms:.2f} ms at {concurrency} sequences"
    nan = math.nan
    return PhysicsCheck(nan, nan, nan, nan, floor_ms, flag)
