"""The normalized operator-sample table every timing source produces.

All times are milliseconds for ONE transformer layer on ONE GPU, after tensor-parallel sharding
(except the collectives, which are per call). Every source (aiconfigurator, vidur, roofline)
fills the same frames, so fitting and grid building never care where samples came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the sources build the frames; this module needs no pandas at start-up
    import pandas as pd

# Token-count operators of one layer (Vidur's names). Missing ones count as 0 ms.
TOKEN_OPS = (
    "attn_pre_proj",  # QKV projection GEMM
    "attn_post_proj",  # output projection GEMM
    "attn_rope",
    "input_layernorm",
    "post_attention_layernorm",
    "mlp_up_proj",  # gate+up GEMM
    "mlp_down_proj",
    "mlp_act",
    "add",
    "attn_kv_cache_save",  # keyed by exact token count, not rounded
)
# Token-count operators of a mixture-of-experts layer (present only for MoE models; the
# provenance's layer_weights says in what share of the layers each op runs)
MOE_TOKEN_OPS = ("moe_router", "moe_experts", "moe_shared", "moe_dispatch", "moe_combine")
# Token-count operators only some architectures have (absent ops count as 0 ms): the MoE ops and
# the TP all-reduce of q/k norms that span all heads (MiniMax-M2)
EXTRA_TOKEN_OPS = (*MOE_TOKEN_OPS, "attn_qk_norm_allreduce")


@dataclass(frozen=True)
class OperatorSamples:
    """Measured or modelled operator latencies, one frame per operator family.

    token_ops:  columns op (one of TOKEN_OPS), num_tokens (int), time_ms
    decode:     columns batch_size (int), kv_len (int, tokens already cached per request), time_ms
    prefill:    columns kv_len (int, cached prefix tokens), chunk (int, new tokens), time_ms
                (one request; batched prefills are mapped onto this by the root-sum-square rule)
    all_reduce: columns num_tokens (int, hidden-size fp16 rows), time_ms  (empty when TP == 1)
    send_recv:  columns num_tokens (int), time_ms  (empty when PP == 1)
    """

    source: str
    token_ops: pd.DataFrame
    decode: pd.DataFrame
    prefill: pd.DataFrame
    all_reduce: pd.DataFrame
    send_recv: pd.DataFrame
    provenance: dict = field(default_factory=dict)
    """Files (with content hashes) and settings the samples came from; part of the grid hash."""
