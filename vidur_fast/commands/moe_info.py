"""The MoE part of `vidur-fast profiles show`: each operator of one MoE layer and its time."""

import numpy as np

from vidur_fast.catalog import ModelSpec
from vidur_fast.timing.samples import MOE_TOKEN_OPS

TOKENS = (1, 8, 64, 512, 2048, 8192, 32768)
LABELS = {
    "moe_router": "router",
    "moe_experts": "experts",
    "moe_shared": "shared",
    "moe_dispatch": "dispatch",
    "moe_combine": "combine",
}


def moe_lines(model: ModelSpec, device, node, tp: int, pp: int, cfg, allreduce_ms) -> list[str]:
    """Lines naming the expert, dispatch and combine operators of one MoE layer (ms per GPU)
    at a few token counts per DP rank, with where the expert kernel's times come from."""
    from vidur_fast.timing.sources import load_samples

    s = load_samples(
        cfg.source, model, device, node, tp, pp, profile_dir=cfg.profile_dir,
        backend=cfg.backend, precision=cfg.precision, kv_cache_dtype=cfg.kv_cache_dtype,
        kernel_envelope=cfg.kernel_envelope, moe_ep=cfg.moe_ep,
        attention_dp=cfg.attention_dp, moe_routing=cfg.moe_routing,
        **({"moe_kernel": cfg.moe_kernel} if cfg.source == "aiconfigurator" else {}),
    )  # fmt: skip
    p = s.provenance.get("moe", {})
    x = model.moe
    shape = p.get("measured_shape") or {}
    match = "exact shape" if p.get("exact") else p.get("rule", "")
    if shape and not p.get("exact"):
        match += " from " + ", ".join(f"{k}={v}" for k, v in shape.items())
    kinds = model.mlp_layers or ()
    n_moe = kinds.count("moe") if kinds else model.num_layers
    out = [
        f"MoE layers ({n_moe} of {model.num_layers}): {x.num_experts} experts, top-{x.top_k}, "
        f"width {x.expert_dim}; tp {tp} x attention_dp {p.get('attention_dp', 1)} = moe_tp "
        f"{p.get('moe_tp')} x moe_ep {p.get('moe_ep')}",
        f"experts: {p.get('moe_dtype')} fused MoE kernel, routing {p.get('distribution')}, "
        f"{match} (tables {s.provenance.get('versions', {}).get('moe', 'none')}"
        + (f", kernel {', '.join(p['kernel'])}" if p.get("kernel") else "")
        + ")",
    ]
    dp = p.get("attention_dp", 1)
    if dp > 1:
        out.append(f"dispatch: {p.get('moe_dispatch')}; combine: {p.get('moe_combine')}")
    else:
        out.append(
            "dispatch: none (after tensor-parallel attention every rank holds all tokens); "
            "combine: the layer's TP all-reduce" + (" (none at TP 1)" if tp == 1 else "")
        )
    tok = s.token_ops
    ops = [op for op in MOE_TOKEN_OPS if (tok.op == op).any()]
    head = f"{'tokens':>8} " + " ".join(f"{LABELS[op]:>9}" for op in ops)
    if dp == 1:
        head += f" {'combine':>9}"
    out.append("per MoE layer (ms), tokens per DP rank:")
    out.append(head)
    for n in TOKENS:
        vals = []
        for op in ops:
            r = tok[tok.op == op].sort_values("num_tokens")
            vals.append(np.interp(n, r.num_tokens.to_numpy(), r.time_ms.to_numpy()))
        line = f"{n:>8} " + " ".join(f"{v:>9.4f}" for v in vals)
        if dp == 1:
            ar = allreduce_ms[n] if n < len(allreduce_ms) else float("nan")
            line += f" {ar:>9.4f}"
        out.append(line)
    return out
