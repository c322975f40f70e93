"""Memory planner: KV-cache blocks per replica."""

from dataclasses import dataclass

from vidur_fast.catalog import DeviceSpec, ModelSpec
from vidur_fast.catalog.arch import WEIGHT_FORMAT_BYTES, weight_format_bytes
from vidur_fast.errors import ConfigError

BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp8_block": 1}
# bytes per weight by GEMM precision: NVFP4 stores 4-bit values plus one fp8 (e4m3) scale per
# 16 values (and one fp32 scale per tensor, negligible): 0.5 + 1/16 bytes
WEIGHT_BYTES = {**BYTES, "nvfp4": 0.5625}
# vLLM view of memory outside weights and KV (memory_model="vllm"): NCCL and custom all-reduce
# buffers per GPU when TP > 1 (not visible to the torch allocator), and the fp32 copies the
# sampler's dummy run makes of one logits row per sequence (logits + probabilities).
VLLM_COMM_BUFFER_BYTES = 400 * 2**20
VLLM_SAMPLER_COPIES = 2


@dataclass(frozen=True)
class MemoryPlan:
    param_bytes: int
    available_bytes: int
    kv_bytes_per_token: int
    num_blocks: int
    max_batch_size: int  # request-slot planner only (0 for the token planner)
    max_request_slots: int

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks  # multiplied by block size by callers that need tokens


def _check_dtype(field: str, value: str, table: dict = BYTES) -> None:
    if value not in table:
        raise ConfigError(f"{field}: unknown dtype {value!r}; allowed: {', '.join(table)}")


def weight_bytes(
    model: ModelSpec,
    tp: int,
    pp: int,
    weight_dtype: str = "bf16",
    embeddings: bool = False,
    ep: int = 1,
    dp: int = 1,
) -> int:
    """Weight bytes per device: transformer layers at weight_dtype, plus (embeddings=True) the
    input embedding and LM head in bf16 (fp8 checkpoints keep them unquantised).

    MoE, MLA and sliding-window models count every weight group (model_weight_bytes): the
    checkpoint's own formats where it states a quantization, else weight_dtype for the linear
    layers; the routed experts split over ep expert ranks (ep > 1) or over the tp x dp ranks
    of the expert tensor parallelism (ep = 1)."""
    _check_dtype("predictor.precision", weight_dtype, WEIGHT_BYTES)
    if not model.is_dense:
        quant = None if model.quantization or weight_dtype == "bf16" else weight_dtype
        groups = model_weight_bytes(model, tp, pp, ep, quant)
        if ep == 1 and dp > 1:
            groups["experts"] = model_weight_bytes(model, tp * dp, pp, 1, quant)["experts"]
        if not embeddings:
            groups.pop("embeddings", None)
            groups.pop("lm_head", None)
        return int(sum(groups.values()))
    out = int(WEIGHT_BYTES[weight_dtype] * model.params_per_device(tp, pp))
    if embeddings:
        out += BYTES["bf16"] * model.embedding_params_per_device(tp, pp)
    return out


def kv_bytes_per_token(model: ModelSpec, tp: int, layers: int, kv_dtype: str = "bf16") -> int:
    """K and V of one token over `layers` layers on one device.

    Models with sliding-window layers count the full-attention layers only: a sliding layer
    holds at most the blocks of its window per sequence (vLLM frees the rest), which the
    per-token block accounting of the engine does not carry (docs/models.md)."""
    _check_dtype("predictor.kv_cache_dtype", kv_dtype)
    if not model.is_dense:
        per_kind = model.kv_bytes_per_token_by_kind(tp, BYTES[kv_dtype])
        share = layers / model.num_layers
        return int(round(sum(v for k, v in per_kind.items() if k != "sliding") * share))
    return BYTES[kv_dtype] * 2 * model.head_dim * model.kv_heads_per_worker(tp) * layers


def vllm_runtime_bytes(
    model: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int
) -> int:
    """Memory vLLM keeps outside weights and KV cache on each GPU, as its start-up profiling
    sees it: the peak of a forward pass over max_num_batched_tokens tokens (per token: the
    residual and normed hidden rows, the gated MLP's up projection and its activation, bf16),
    the sampler's fp32 logits copies for max_num_seqs sequences, and the communication buffers
    outside the torch allocator when TP > 1. CUDA graphs are captured after the KV cache is
    sized, inside the (1 - gpu_memory_utilization) headroom, so they take nothing here."""
    h_local = -(-model.mlp_hidden_dim // tp)
    if model.moe is not None and model.mlp_layers.count("dense") == 0:
        # the fused MoE kernel's intermediate rows: top-k expert rows per token
        h_local = -(-model.moe.top_k * model.moe.expert_dim // tp)
    up = (2 if model.use_gated_mlp else 1) * h_local
    per_token = BYTES["bf16"] * (2 * model.embedding_dim + up + h_local)
    forward = max_num_batched_tokens * per_token
    # logits are gathered to the full vocabulary on every rank before sampling
    rows = min(max_num_seqs, max_num_batched_tokens)
    sampler = VLLM_SAMPLER_COPIES * 4 * rows * model.vocab_size
    comm = VLLM_COMM_BUFFER_BYTES if tp > 1 else 0
    return forward + sampler + comm


def _free_bytes(
    model: ModelSpec,
    device: DeviceSpec,
    tp: int,
    pp: int,
    margin: float,
    weight_dtype: str,
    embeddings: bool = False,
    runtime: int = 0,
    ep: int = 1,
    dp: int = 1,
) -> tuple[int, int]:
    param = weight_bytes(model, tp, pp, weight_dtype, embeddings, ep, dp)
    avail = int(device.memory_bytes * (1.0 - margin)) - runtime
    if avail <= param:
        raise ConfigError(
            f"cluster: {model.name} weights need {param / 2**30:.1f} GiB per GPU at TP {tp} "
            f"PP {pp}, more than the {avail / 2**30:.1f} GiB usable on {device.name}; "
            "raise tp/pp or lower memory_margin_fraction"
        )
    return param, avail


def plan_tokens(
    model: ModelSpec,
    device: DeviceSpec,
    tp: int,
    pp: int,
    block_size: int,
    margin: float = 0.1,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    embeddings: bool = False,
    runtime_bytes: int = 0,
    ep: int = 1,
    dp: int = 1,
) -> MemoryPlan:
    """Token planner (vLLM v1): every free byte after weights (and runtime_bytes of activations
    and buffers) holds KV for this stage's layers. embeddings=False, runtime_bytes=0 is
    Vidur's planner; the vllm memory model passes True and vllm_runtime_bytes()."""
    param, avail = _free_bytes(
        model, device, tp, pp, margin, weight_dtype, embeddings, runtime_bytes, ep, dp
    )
    per_tok = kv_bytes_per_token(model, tp, model.num_layers // pp, kv_dtype)
    tokens = (avail - param) // per_tok
    blocks = int(tokens // block_size)
    if blocks < 1:
        raise ConfigError(f"cluster: no room for a single KV block of {block_size} tokens")
    return MemoryPlan(param, avail, per_tok, blocks, 0, 0)


def plan_request_slots(
    model: ModelSpec,
    device: DeviceSpec,
    tp: int,
    pp: int,
    block_size: int,
    max_tokens: int,
    margin: float = 0.1,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
) -> MemoryPlan:
    """Vidur's request-slot planner: slots of max_tokens each, KV of all layers per request
    (intentional for pipeline micro-batches, Vidur issue #18)."""
    param, avail = _free_bytes(model, device, tp, pp, margin, weight_dtype)
    per_tok_all = kv_bytes_per_token(model, tp, 1, kv_dtype)
    per_req = per_tok_all * max_tokens * model.num_layers
    max_batch = int((avail - param) // per_req)
    if max_batch < 1:
        raise ConfigError(
            f"scheduler.max_tokens: {max_tokens} tokens of KV per request do not fit on "
            f"{device.name} at TP {tp} PP {pp}"
        )
    slots = max_batch * pp
    blocks = (max_tokens // block_size) * slots
    return MemoryPlan(param, avail, per_tok_all * model.num_layers // pp, blocks, max_batch, slots)


# ---- models beyond dense GQA: MoE weights per EP rank, MLA and sliding-window KV ----

LINEAR_GROUPS = ("attention", "dense_mlp", "experts", "shared_experts")


def model_weight_bytes(
    model: ModelSpec, tp: int, pp: int = 1, ep: int = 1, quantization: str | None = None
) -> dict[str, int]:
    """Weight bytes by group on the most loaded device (all experts of a rank's MoE layers).

    quantization None: the checkpoint's own formats (model.quantized_groups at
    model.quantization, every other group bf16); a format name: the linear groups (attention,
    dense MLP, routed and shared experts) at that format, router, norms, embedding and LM head
    bf16 (how fp8/fp4 serving of a bf16 checkpoint stores them)."""
    groups = model.params_per_device_by_group(tp, pp, ep)
    if quantization is None:
        fmt, quantized = model.quantization or "bf16", model.quantized_groups
    else:
        fmt, quantized = quantization, LINEAR_GROUPS
    low = weight_format_bytes(fmt, model.quant_group_size)
    return {
        g: int(round(n * (low if g in quantized else WEIGHT_FORMAT_BYTES["bf16"])))
        for g, n in groups.items()
    }


def model_kv_bytes_per_token(model: ModelSpec, tp: int = 1, kv_dtype: str = "bf16") -> dict:
    """KV bytes one token adds on one TP rank, per attention kind ("full", "sliding", "mla")."""
    _check_dtype("predictor.kv_cache_dtype", kv_dtype)
    return model.kv_bytes_per_token_by_kind(tp, BYTES[kv_dtype])


def kv_bytes_per_sequence(
    model: ModelSpec, tp: int, seq_len: int, kv_dtype: str = "bf16", block_size: int = 16
) -> int:
    """KV bytes of one sequence of seq_len tokens on one TP rank (all layers), in whole blocks:
    full-attention and MLA layers hold every token, sliding layers at most the window (the
    blocks a window of sliding_window tokens can touch: ceil((window - 1) / block) + 1)."""
    per_kind = model_kv_bytes_per_token(model, tp, kv_dtype)
    blocks = -(-seq_len // block_size)
    out = 0
    for kind, per_tok in per_kind.items():
        n = blocks
        if kind == "sliding":
            n = min(blocks, -(-(model.sliding_window - 1) // block_size) + 1)
        out += n * block_size * per_tok
    return out


@dataclass(frozen=True)
class ModelMemoryPlan:
    """Memory of one device serving a model at one sequence length."""

    weight_bytes: dict
    """Bytes by weight group on the most loaded device."""
    available_bytes: int
    """Device memory after the margin and runtime bytes."""
    kv_bytes_per_token: dict
    """Per attention kind, one token on one TP rank."""
    kv_bytes_per_sequence: int
    max_sequences: int
    """Sequences of seq_len tokens whose KV fits beside the weights."""

    @property
    def total_weight_bytes(self) -> int:
        return sum(self.weight_bytes.values())


def plan_model_memory(
    model: ModelSpec,
    device: DeviceSpec,
    tp: int,
    seq_len: int,
    pp: int = 1,
    ep: int = 1,
    block_size: int = 16,
    margin: float = 0.1,
    kv_dtype: str = "bf16",
    quantization: str | None = None,
    runtime_bytes: int = 0,
) -> ModelMemoryPlan:
    """How many sequences of seq_len tokens fit on one device next to its weights (every
    architecture: MoE experts per EP rank, MLA's compressed KV, sliding windows bounded)."""
    weights = model_weight_bytes(model, tp, pp, ep, quantization)
    param = sum(weights.values())
    avail = int(device.memory_bytes * (1.0 - margin)) - runtime_bytes
    if avail <= param:
        raise ConfigError(
            f"cluster: {model.name} weights need {param / 2**30:.1f} GiB per GPU at TP {tp} "
            f"PP {pp} EP {ep}, more than the {avail / 2**30:.1f} GiB usable on {device.name}"
        )
    per_seq = kv_bytes_per_sequence(model, tp, seq_len, kv_dtype, block_size)
    per_seq = -(-per_seq // pp)  # layers split evenly over the stages
    return ModelMemoryPlan(
        weight_bytes=weights,
        available_bytes=avail,
        kv_bytes_per_token=model_kv_bytes_per_token(model, tp, kv_dtype),
        kv_bytes_per_sequence=per_seq,
        max_sequences=int((avail - param) // per_seq),
    )
