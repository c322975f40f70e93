"""Sources of operator samples: measured (aiconfigurator, vidur) or analytic (roofline).

Each returns the same OperatorSamples table (vidur_fast.timing.samples): ms for one layer on
one GPU after TP sharding, collectives per call. docs/timing_sources.md documents the models.
"""

from pathlib import Path

from vidur_fast.catalog import DeviceSpec, ModelSpec, NodeSpec
from vidur_fast.catalog.arch import beyond_dense_message
from vidur_fast.timing.samples import OperatorSamples
from vidur_fast.timing.sources import aiconfigurator, roofline, vidur
from vidur_fast.timing.sources._common import join, profile_error

SOURCES = ("aiconfigurator", "vidur", "roofline")


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise profile_error(source, f"unknown timing source; available: {join(SOURCES)}")


def load_samples(
    source: str,
    model: ModelSpec,
    device: DeviceSpec,
    node: NodeSpec,
    tp: int,
    pp: int,
    *,
    profile_dir: str | Path | None = None,
    backend: str = "vllm",
    block_size: int = 16,
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
    """Operator samples of `model` on `device` in `node` at the given TP and PP.

    profile_dir: the Vidur profiling directory (required for vidur) or a copy of
    aiconfigurator's systems directory (default: the installed aiconfigurator_core package).
    backend: aiconfigurator serving backend (vllm, trtllm, sglang). block_size: Vidur
    attention.csv filter. precision: bf16 or fp8 GEMMs (aiconfigurator, roofline; fp8_block
    aiconfigurator only). kv_cache_dtype: bf16, fp16 or fp8 KV cache (attention and KV save).
    kernel_envelope: the fastest-kernel envelope of aiconfigurator's GEMM and all-reduce tables.
    decode_attention_kv_dtype: aiconfigurator only; the KV-cache dtype whose measured decode
    attention kernels time decode ("" = kv_cache_dtype). allreduce_rms_fusion: aiconfigurator
    only; the residual add and RMSNorms fused into the TP all-reduces (vLLM fuse_allreduce_rms).
    Raises ProfileError (one line naming the file/field and what is available) on bad input.
    """
    _check_source(source)
    if tp < 1 or pp < 1:
        raise profile_error(source, f"tp and pp must be >= 1 (got tp={tp}, pp={pp})")
    if source == "vidur" and not model.is_dense:
        raise profile_error(
            source,
            beyond_dense_message(
                model,
                "not in Vidur's profiles (predictor.source=aiconfigurator or roofline models it)",
            ),
        )
    if decode_attention_kv_dtype and source != "aiconfigurator":
        raise profile_error(source, "decode_attention_kv_dtype needs the aiconfigurator source")
    if allreduce_rms_fusion and source != "aiconfigurator":
        raise profile_error(source, "allreduce_rms_fusion needs the aiconfigurator source")
    if source == "vidur":
        return vidur.load(
            model, device, node, tp, pp,
            profile_dir=profile_dir, block_size=block_size, precision=precision,
            kv_cache_dtype=kv_cache_dtype,
        )  # fmt: skip
    if source == "aiconfigurator":
        return aiconfigurator.load(
            model, device, node, tp, pp,
            profile_dir=profile_dir, backend=backend, precision=precision,
            kv_cache_dtype=kv_cache_dtype, kernel_envelope=kernel_envelope,
            moe_ep=moe_ep, attention_dp=attention_dp, moe_routing=moe_routing,
            moe_kernel=moe_kernel,
            decode_attention_kv_dtype=decode_attention_kv_dtype,
            allreduce_rms_fusion=allreduce_rms_fusion,
        )  # fmt: skip
    return roofline.load(
        model, device, node, tp, pp, precision=precision, kv_cache_dtype=kv_cache_dtype,
        moe_ep=moe_ep, attention_dp=attention_dp, moe_routing=moe_routing,
    )  # fmt: skip


def available(source: str, profile_dir: str | Path | None = None) -> dict:
    """What a source can provide (models/devices/TPs/systems), for `profiles list` and errors."""
    _check_source(source)
    if source == "vidur":
        return vidur.available(profile_dir)
    if source == "aiconfigurator":
        return aiconfigurator.available(profile_dir)
    return roofline.available()


__all__ = ["SOURCES", "available", "load_samples"]
