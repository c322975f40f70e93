"""Memory planner: KV-cache blocks per replica (SPEC section 7)."""

from dataclasses import dataclass

from vidur_fast.catalog import DeviceSpec, ModelSpec
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
    model: ModelSpec, tp: int, pp: int, weight_dtype: str = "bf16", embeddings: bool = False
) -> int:
    """Weight bytes per device: transformer layers at weight_dtype, plus (embeddings=True) the
    input embedding and LM head in bf16 (fp8 checkpoints keep them unquantised)."""
    _check_dtype("predictor.precision", weight_dtype, WEIGHT_BYTES)
    out = int(WEIGHT_BYTES[weight_dtype] * model.params_per_device(tp, pp))
    if embeddings:
        out += BYTES["bf16"] * model.embedding_params_per_device(tp, pp)
    return out


def kv_bytes_per_token(model: ModelSpec, tp: int, layers: int, kv_dtype: str = "bf16") -> int:
    """K and V of one token over `layers` layers on one device."""
    _check_dtype("predictor.kv_cache_dtype", kv_dtype)
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
) -> tuple[int, int]:
    param = weight_bytes(model, tp, pp, weight_dtype, embeddings)
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
) -> MemoryPlan:
    """Token planner (vLLM v1): every free byte after weights (and runtime_bytes of activations
    and buffers) holds KV for this stage's layers. embeddings=False, runtime_bytes=0 is SPEC
    7.2; the vllm memory model passes True and vllm_runtime_bytes()."""
    param, avail = _free_bytes(
        model, device, tp, pp, margin, weight_dtype, embeddings, runtime_bytes
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
