"""Memory planner: KV-cache blocks per replica (SPEC section 7)."""

from dataclasses import dataclass

from vidur_fast.catalog import DeviceSpec, ModelSpec
from vidur_fast.errors import ConfigError

BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


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


def _free_bytes(
    model: ModelSpec, device: DeviceSpec, tp: int, pp: int, margin: float, weight_dtype: str
) -> tuple[int, int]:
    param = BYTES[weight_dtype] * model.params_per_device(tp, pp)
    avail = int(device.memory_bytes * (1.0 - margin))
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
) -> MemoryPlan:
    """Token planner (vLLM v1): every free byte after weights holds KV for this stage's layers."""
    param, avail = _free_bytes(model, device, tp, pp, margin, weight_dtype)
    per_tok = (
        BYTES[kv_dtype]
        * 2
        * model.head_dim
        * model.kv_heads_per_worker(tp)
        * (model.num_layers // pp)
    )
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
    per_tok_all = BYTES[kv_dtype] * 2 * model.head_dim * model.kv_heads_per_worker(tp)
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
