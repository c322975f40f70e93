"""`vidur-fast profiles model`: a model's architecture, parameter counts and memory plan.

Works for every model the catalog reads, including those the timing does not model yet
(mixture-of-experts, MLA, sliding windows): it reads and plans, it does not simulate.
"""

from dataclasses import dataclass

from vidur_fast.catalog import get_device, get_model
from vidur_fast.catalog.arch import DENSE, MOE, SLIDING
from vidur_fast.errors import ConfigError


@dataclass(frozen=True)
class ProfilesModel:
    """Print a model's layers, total and active parameters, per-device weights, KV
    bytes per token and how many sequences fit on a device."""

    model: str = "meta-llama/Meta-Llama-3-8B"
    """Catalog model name or a path to a Hugging Face config.json."""
    device: str = "h100"
    tp: int = 1
    """Tensor-parallel GPUs."""
    pp: int = 1
    """Pipeline stages."""
    ep: int = 1
    """Expert-parallel ranks the routed experts are split over (1: experts split over TP)."""
    seq_len: int = 8192
    """Tokens per sequence for the sequences-that-fit count."""
    quantization: str | None = None
    """Weight format of the linear layers (fp8, fp8_block, nvfp4, mxfp4, int4_wo, bf16);
    None: the checkpoint's own formats."""
    kv_cache_dtype: str = "bf16"
    memory_margin_fraction: float = 0.1


def _b(n: float) -> str:
    return f"{n / 1e9:.2f}B"


def describe(a: ProfilesModel) -> list[str]:
    """The lines `profiles model` prints."""
    from vidur_fast.params.memory import plan_model_memory

    for name, value in (("tp", a.tp), ("pp", a.pp), ("ep", a.ep), ("seq_len", a.seq_len)):
        if value < 1:
            raise ConfigError(f"{name}: must be >= 1 (got {value})")
    m = get_model(a.model)
    m.check_parallelism(a.tp, a.pp)
    kind = f" ({m.model_type})" if m.model_type else ""
    if m.mla is not None:
        attn = f"{m.num_q_heads} MLA heads"
    else:
        attn = f"{m.num_q_heads} q / {m.num_kv_heads} kv heads x {m.head_dim}"
    lines = [
        f"{m.name}{kind}: {m.num_layers} layers, hidden {m.embedding_dim}, {attn}, "
        f"vocabulary {m.vocab_size}"
    ]
    if m.moe is not None:
        x, kinds = m.moe, m.mlp_layers
        shared = (
            f", {x.num_shared_experts} shared of {x.shared_expert_dim}"
            if x.num_shared_experts
            else ""
        )
        lines.append(
            f"  experts: {x.num_experts} ({x.field}), top-{x.top_k}, width {x.expert_dim}{shared}; "
            f"{kinds.count(MOE)} MoE + {kinds.count(DENSE)} dense layers (width {m.mlp_hidden_dim})"
        )  # fmt: skip
    else:
        lines.append(f"  MLP: dense, width {m.mlp_hidden_dim}")
    if m.mla is not None:
        a_ = m.mla
        lines.append(
            f"  MLA: kv_lora_rank {a_.kv_lora_rank}, q_lora_rank {a_.q_lora_rank}, rope "
            f"{a_.qk_rope_head_dim}, nope {a_.qk_nope_head_dim}, v {a_.v_head_dim}"
        )
    if m.layer_attention:
        n = m.layer_attention.count(SLIDING)
        lines.append(
            f"  attention: {n} sliding (window {m.sliding_window}) + {m.num_layers - n} full"
        )
    c = m.param_count
    if m.quantization:
        present = [g for g in m.quantized_groups if getattr(c, g)]
        lines.append(f"  checkpoint: {m.quantization} ({', '.join(present)}), rest bf16")
    mtp = f", MTP layers {m.num_mtp_layers} ({_b(c.mtp)}, not run)" if m.num_mtp_layers else ""
    lines.append(
        f"  parameters: total {_b(c.total)}, active {_b(c.active)} (without the input embedding "
        f"{_b(c.active - c.embedding)}){mtp}"
    )
    plan = plan_model_memory(
        m, get_device(a.device), a.tp, a.seq_len, pp=a.pp, ep=a.ep, margin=a.memory_margin_fraction,
        kv_dtype=a.kv_cache_dtype, quantization=a.quantization,
    )  # fmt: skip
    groups = ", ".join(f"{g} {v / 2**30:.2f}" for g, v in plan.weight_bytes.items() if v)
    lines.append(
        f"  per device at TP {a.tp} PP {a.pp} EP {a.ep}: weights "
        f"{plan.total_weight_bytes / 2**30:.2f} GiB ({groups})"
    )
    kv = ", ".join(f"{k} {v}" for k, v in plan.kv_bytes_per_token.items())
    lines.append(f"  KV bytes per token ({a.kv_cache_dtype}, one TP rank): {kv}")
    lines.append(
        f"  on {a.device} (margin {a.memory_margin_fraction}): {plan.max_sequences} sequence(s) of "
        f"{a.seq_len} tokens ({plan.kv_bytes_per_sequence / 2**20:.1f} MiB of KV each)"
    )
    missing = m.unmodelled_features()
    if missing:
        lines.append(f"  not modelled yet: {', '.join(missing)} timing (simulate refuses it)")
    return lines


def profiles_model(a: ProfilesModel) -> int:
    print("\n".join(describe(a)))
    return 0
