"""Architecture parts beyond a dense GQA decoder: mixture-of-experts MLPs, multi-head latent
attention, per-layer kinds, and the parameter counts of a whole model.

A `ModelSpec` with none of these parts is a dense model and is counted exactly as before; the
counts here (`param_count`) cover every weight (embeddings, norms, biases included), which is
what model cards publish, while `ModelSpec.params_per_device` keeps the transformer-layer GEMM
weights the timing and memory models of dense models have always used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vidur_fast.errors import ConfigError

if TYPE_CHECKING:
    from vidur_fast.catalog.models import ModelSpec

# Per-layer kinds
DENSE, MOE = "dense", "moe"
FULL, SLIDING = "full", "sliding"
# Weight groups (quantization is stated per group)
WEIGHT_GROUPS = (
    "attention",
    "dense_mlp",
    "experts",
    "shared_experts",
    "router",
    "embeddings",
    "lm_head",
)


@dataclass(frozen=True)
class MoESpec:
    """The routed (and shared) experts of the MoE layers."""

    num_experts: int
    """Routed experts per MoE layer."""
    top_k: int
    """Routed experts each token goes through."""
    expert_dim: int
    """Intermediate width of one routed expert (a gated MLP)."""
    num_shared_experts: int = 0
    """Shared experts every token goes through."""
    shared_expert_dim: int = 0
    """Intermediate width of one shared expert."""
    field: str = "num_experts"
    """The config.json field that stated the expert count (for messages)."""


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): K and V live in one compressed latent."""

    kv_lora_rank: int
    q_lora_rank: int
    """0: queries projected directly (no low-rank query path)."""
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int

    @property
    def kv_latent_dim(self) -> int:
        """Elements cached per token and layer: the latent plus the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class ParamCount:
    """Parameters of a model by weight group (counts, not bytes)."""

    embedding: int
    lm_head: int
    attention: int
    dense_mlp: int
    experts: int
    """All routed experts of all MoE layers."""
    experts_active: int
    """The top-k routed experts a token goes through, over all MoE layers."""
    shared_experts: int
    router: int
    norms: int
    mtp: int
    """Multi-token-prediction layers (stored, counted apart, not run)."""

    @property
    def total(self) -> int:
        """Every weight of the main model (MTP layers excluded: see `mtp`)."""
        return (
            self.embedding + self.lm_head + self.attention + self.dense_mlp + self.experts
            + self.shared_experts + self.router + self.norms
        )  # fmt: skip

    @property
    def active(self) -> int:
        """Weights one token goes through, input embedding and LM head included (the convention
        of most model cards; gpt-oss's card leaves out the input embedding)."""
        return self.total - self.experts + self.experts_active


def _gated_mlp(e: int, width: int) -> int:
    return 3 * e * width


def attention_params(m: ModelSpec) -> int:
    """Attention weights of one layer (projections and their biases, q/k norms)."""
    e = m.embedding_dim
    if m.mla is not None:
        a, qh = m.mla, m.num_q_heads
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = e * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * qh * qk
        else:
            q = e * qh * qk
        kv = e * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
        kv += a.kv_lora_rank * qh * (a.qk_nope_head_dim + a.v_head_dim)
        return q + kv + qh * a.v_head_dim * e
    qkv_out = m.q_dim + 2 * m.kv_dim
    out = e * qkv_out + m.q_dim * e
    if m.qkv_bias:
        out += qkv_out
    if m.qk_norm:
        out += 2 * m.head_dim
    return out


def moe_layer_params(m: ModelSpec) -> tuple[int, int, int, int]:
    """(routed experts, top-k routed experts, shared experts, router) of one MoE layer."""
    x, e = m.moe, m.embedding_dim
    one = _gated_mlp(e, x.expert_dim)
    shared = x.num_shared_experts * _gated_mlp(e, x.shared_expert_dim)
    return x.num_experts * one, x.top_k * one, shared, e * x.num_experts


def dense_mlp_params(m: ModelSpec) -> int:
    return (3 if m.use_gated_mlp else 2) * m.embedding_dim * m.mlp_hidden_dim


def qk_norm_spans_heads(m: ModelSpec) -> bool:
    """MiniMax-M2's q/k RMSNorm normalises all heads together (its q_norm weight has heads x
    head_dim entries), so under TP vLLM all-reduces the variance across the ranks (one small
    all-reduce for q and one for k per layer); Qwen3-style norms are per head and local."""
    return m.qk_norm and m.model_type == "minimax_m2"


def router_gate_fp32(m: ModelSpec) -> bool:
    """vLLM's MiniMax-M2 MoE block keeps its router gate in fp32 (`params_dtype=torch.float32`,
    `quant_config=None`) and casts the hidden states to fp32 before it
    (`vllm/model_executor/models/minimax_m2.py`): an FP32 GEMM on the CUDA cores plus a cast.
    The other MoE models' gates run in the activation dtype (bf16)."""
    return m.moe is not None and m.model_type == "minimax_m2"


def mlp_kinds(m: ModelSpec) -> tuple[str, ...]:
    return m.mlp_layers or (DENSE,) * m.num_layers


def attention_kinds(m: ModelSpec) -> tuple[str, ...]:
    return m.layer_attention or (FULL,) * m.num_layers


def param_count(m: ModelSpec) -> ParamCount:
    e = m.embedding_dim
    kinds = mlp_kinds(m)
    n_moe = kinds.count(MOE)
    n_dense = len(kinds) - n_moe
    experts = active = shared = router = 0
    if m.moe is not None:
        experts, active, shared, router = (n_moe * v for v in moe_layer_params(m))
    attn = attention_params(m)
    norms = 2 * e * m.num_layers + e
    mtp = 0
    if m.num_mtp_layers:
        # one decoder layer (MoE when the model has experts) plus the projection of the
        # concatenated [embedding; hidden] rows and its norms
        layer = attn + 2 * e
        if m.moe is not None:
            layer += sum(moe_layer_params(m)[i] for i in (0, 2, 3))
        else:
            layer += dense_mlp_params(m)
        mtp = m.num_mtp_layers * (layer + 2 * e * e + 3 * e)
    vocab = m.vocab_size * e
    return ParamCount(
        embedding=vocab,
        lm_head=0 if m.tie_word_embeddings else vocab,
        attention=attn * m.num_layers,
        dense_mlp=n_dense * dense_mlp_params(m),
        experts=experts,
        experts_active=active,
        shared_experts=shared,
        router=router,
        norms=norms,
        mtp=mtp,
    )


def beyond_dense_features(m: ModelSpec) -> list[tuple[str, str]]:
    """What makes a model more than a dense GQA decoder: (what the model is, naming the
    config field; the short name of the feature), one pair per feature."""
    out = []
    if m.moe is not None:
        out.append((f"is a mixture-of-experts model ({m.moe.field}={m.moe.num_experts})", "MoE"))
    if m.mla is not None:
        out.append((f"uses multi-head latent attention (kv_lora_rank={m.mla.kv_lora_rank})", "MLA"))
    n_sliding = attention_kinds(m).count(SLIDING)
    if n_sliding:
        out.append((
            f"uses sliding-window attention (sliding_window={m.sliding_window} on {n_sliding} "
            f"of {m.num_layers} layers)",
            "sliding-window",
        ))  # fmt: skip
    return out


# Features the timing models (MLA from the aiconfigurator source only; docs/timing_model.md)
TIMED_FEATURES = ("MoE", "sliding-window", "MLA")


def unmodelled_features(m: ModelSpec) -> list[tuple[str, str]]:
    """What the timing does not model yet (today: nothing), as beyond_dense_features."""
    return [f for f in beyond_dense_features(m) if f[1] not in TIMED_FEATURES]


def _features_message(m: ModelSpec, parts: list[tuple[str, str]], tail: str) -> str:
    if not parts:
        return ""
    what = " and ".join(p for p, _ in parts)
    names = [n for _, n in parts]
    label = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    verb = "is" if len(names) == 1 else "are"
    return f"{m.name} {what}; {label} timing {verb} {tail}"


def beyond_dense_message(m: ModelSpec, tail: str) -> str:
    """One sentence naming every non-dense feature of m, ending with `tail`."""
    return _features_message(m, beyond_dense_features(m), tail)


def unmodelled_message(m: ModelSpec) -> str:
    """One sentence for all unmodelled features ("" for a model the timing covers)."""
    return _features_message(m, unmodelled_features(m), "not modelled yet")


# ---- one device's share: tensor, pipeline and expert parallelism ----


def _attention_params_per_device(m: ModelSpec, tp: int) -> int:
    e = m.embedding_dim
    if m.mla is not None:
        # the down projections (q_a, kv_a) and their norms are replicated on every TP rank;
        # the up projections and the output projection split the heads
        a = m.mla
        heads = m.q_heads_per_worker(tp)
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        rep = e * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
        if a.q_lora_rank:
            rep += e * a.q_lora_rank + a.q_lora_rank
            split = a.q_lora_rank * heads * qk
        else:
            split = e * heads * qk
        split += a.kv_lora_rank * heads * (a.qk_nope_head_dim + a.v_head_dim)
        return rep + split + heads * a.v_head_dim * e
    q = m.q_heads_per_worker(tp) * m.head_dim
    kv = m.kv_heads_per_worker(tp) * m.head_dim
    out = e * (q + 2 * kv) + q * e
    if m.qkv_bias:
        out += q + 2 * kv
    return out


def params_per_device(m: ModelSpec, tp: int, pp: int = 1, ep: int = 1) -> dict[str, int]:
    """Parameters by weight group on the most loaded device of TP x PP (x EP) ranks.

    Attention and dense/shared MLPs split over TP (KV heads replicated when TP exceeds them;
    MLA's down projections replicated); with ep > 1 each rank holds ceil(experts / ep) whole
    routed experts (vLLM's expert parallelism over TP x DP ranks), with ep = 1 every rank holds
    all experts, each split over TP. The router and norms are replicated. Embedding and LM head
    are vocabulary-parallel over TP: both on every device with one stage (once when tied), the
    embedding on the first stage and the head on the last with several.
    """
    if tp < 1 or pp < 1 or ep < 1:
        raise ValueError(f"tp, pp and ep must be >= 1 (got {tp}, {pp}, {ep})")
    e = m.embedding_dim
    attn = _attention_params_per_device(m, tp)
    dense = -(-((3 if m.use_gated_mlp else 2) * e * m.mlp_hidden_dim) // tp)
    experts = shared = router = 0
    if m.moe is not None:
        x = m.moe
        one = 3 * e * x.expert_dim
        experts = -(-x.num_experts // ep) * one if ep > 1 else -(-x.num_experts * one // tp)
        shared = -(-x.num_shared_experts * 3 * e * x.shared_expert_dim // tp)
        router = e * x.num_experts
    kinds = mlp_kinds(m)
    per_stage = -(-m.num_layers // pp)
    best: dict[str, int] = {}
    for s in range(pp):
        layer_kinds = kinds[s * per_stage : (s + 1) * per_stage]
        n_moe = layer_kinds.count(MOE)
        n_dense = len(layer_kinds) - n_moe
        vocab = -(-m.vocab_size // tp) * e
        emb = vocab if s == 0 else 0
        head = vocab if s == pp - 1 and not (pp == 1 and m.tie_word_embeddings) else 0
        groups = {
            "attention": attn * len(layer_kinds),
            "dense_mlp": dense * n_dense,
            "experts": experts * n_moe,
            "shared_experts": shared * n_moe,
            "router": router * n_moe,
            "norms": 2 * e * len(layer_kinds),
            "embeddings": emb,
            "lm_head": head,
        }
        if not best or sum(groups.values()) > sum(best.values()):
            best = groups
    return best


def kv_elements_per_token(m: ModelSpec, tp: int = 1) -> dict[str, int]:
    """KV-cache elements one token adds on one TP rank, summed over the layers of each
    attention kind: "full" and "sliding" (K and V of the rank's KV heads, replicated when TP
    exceeds them) or "mla" (the compressed latent plus the rotary key, the same on every rank:
    MLA's cache is not split across TP). MTP layers are not run, so they hold no KV."""
    if m.mla is not None:
        return {"mla": m.mla.kv_latent_dim * m.num_layers}
    per_layer = 2 * m.kv_heads_per_worker(tp) * m.head_dim
    kinds = attention_kinds(m)
    out = {FULL: per_layer * kinds.count(FULL)}
    if SLIDING in kinds:
        out[SLIDING] = per_layer * kinds.count(SLIDING)
    return out


# ---- expert parallelism ----


@dataclass(frozen=True)
class MoEParallel:
    """How one MoE layer is split: attention TP x DP ranks = moe_tp x moe_ep expert ranks."""

    tp: int
    dp: int
    moe_tp: int
    moe_ep: int


# columns per scale block of the fp8_block format (128 x 128 blocks, DeepSeek-style checkpoints)
FP8_BLOCK = 128
# int4 weight-only checkpoints' scale group when the config states none
INT4_GROUP = 128
# Bytes per stored weight of each format, scales included: fp8_block one fp32 scale per
# 128x128 block, mxfp4 one E8M0 scale per 32 values, nvfp4 one fp8 scale per 16 values (the
# per-tensor scale is negligible); int4 weight-only adds one bf16 scale per group (the
# checkpoint's group size, INT4_GROUP when unstated: weight_format_bytes).
WEIGHT_FORMAT_BYTES = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0 + 4 / (FP8_BLOCK * FP8_BLOCK),
    "int8": 1.0,
    "mxfp4": 0.5 + 1 / 32,
    "nvfp4": 0.5 + 1 / 16,
}


def weight_format_bytes(fmt: str, group_size: int = 0) -> float:
    """Bytes per stored weight of format fmt, scales included (ConfigError names the formats
    when fmt is none of them)."""
    if fmt == "int4_wo":
        return 0.5 + 2 / (group_size or INT4_GROUP)
    if fmt not in WEIGHT_FORMAT_BYTES:
        allowed = ", ".join([*WEIGHT_FORMAT_BYTES, "int4_wo"])
        raise ConfigError(f"predictor.precision: unknown weight format {fmt!r}; allowed: {allowed}")
    return WEIGHT_FORMAT_BYTES[fmt]


def expert_format(model: ModelSpec, precision: str) -> str:
    """The routed experts' weight format: the checkpoint's when it quantizes them, else the
    predictor's GEMM precision."""
    if model.quantization and "experts" in model.quantized_groups:
        return model.quantization
    return precision


def moe_parallel(model: ModelSpec, tp: int, dp: int, ep: int, expert_fmt: str = "") -> MoEParallel:
    """The expert split of a MoE model; ConfigError (one line) when it cannot be formed, or
    (given the experts' weight format) when vLLM would refuse it: block-scaled FP8 experts
    split over moe_tp GPUs must leave each a whole number of 128-column blocks."""
    x = model.moe
    if x is None:
        raise ConfigError(f"cluster.model: {model.name} has no MoE layers")
    if dp < 1 or ep < 1:
        raise ConfigError(f"predictor.moe_ep/attention_dp: must be >= 1 (got {ep}, {dp})")
    if x.num_experts % ep:
        raise ConfigError(
            f"predictor.moe_ep: {ep} does not divide {model.name}'s {x.num_experts} experts "
            f"({x.field})"
        )
    if (tp * dp) % ep:
        raise ConfigError(
            f"predictor.moe_ep: tp x attention_dp = {tp} x {dp} = {tp * dp} GPUs cannot hold "
            f"moe_ep = {ep} expert ranks times a whole moe_tp (moe_tp x moe_ep must equal "
            "tp x attention_dp)"
        )
    moe_tp = tp * dp // ep
    if x.expert_dim % moe_tp:
        raise ConfigError(
            f"predictor.moe_ep: moe_tp = tp x attention_dp / moe_ep = {moe_tp} does not divide "
            f"the expert width {x.expert_dim}"
        )
    if expert_fmt == "fp8_block" and (x.expert_dim // moe_tp) % FP8_BLOCK:
        raise ConfigError(
            f"predictor.moe_ep: moe_tp = {moe_tp} leaves each GPU {x.expert_dim // moe_tp} of "
            f"an expert's {x.expert_dim} columns, not a multiple of the fp8_block format's "
            f"{FP8_BLOCK}-column blocks (vLLM refuses it); split the experts whole with a "
            f"larger moe_ep (expert parallelism, vLLM's --enable-expert-parallel)"
        )
    return MoEParallel(tp, dp, moe_tp, ep)
