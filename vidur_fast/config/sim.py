"""Simulation config: frozen dataclasses that tyro turns into the CLI.

Unions of dataclasses select policies (tyro subcommands); `params.py` validates and turns the
config into kernel parameters. Nothing here writes files or changes values.
"""

from dataclasses import dataclass, field, replace
from typing import Annotated, Literal

from vidur_fast.config.markers import Subcommand, Suppress
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.workload import ClosedLoopWorkload, SyntheticWorkload, TraceWorkload

# ---- replica schedulers ----


@dataclass(frozen=True)
class VllmV1Scheduler:
    """vLLM v1: one token budget per step shared by decodes and prefill chunks,
    running requests first, recompute preemption of the newest running request (the
    recommended scheduler)."""

    max_num_batched_tokens: int = 8192
    """Token budget per step (vllm serve's default)."""
    max_num_seqs: int = 1024
    """Most requests running at once (vllm serve's default on a GPU of 70 GiB or more)."""
    long_prefill_token_threshold: int = 0
    """Cap on one request's tokens per step when several requests are active (0 = off)."""
    block_size: int = 16
    """Tokens per KV block."""
    num_blocks: int | None = None
    """KV blocks per replica; None = planned from memory (one block is reserved, as vLLM)."""
    reserve_full_sequence: bool = True
    """Admit a request only if its whole current sequence fits in free blocks (vLLM default)."""
    max_model_len: int | None = None
    """Longest sequence a request may reach; None = the model's max_position_embeddings."""
    max_num_partial_prefills: int = 1
    """Most requests in their prefill per step (0 = no cap; 1, the default, serialises
    prefills, as NVIDIA's aiconfigurator models vLLM v1 and as the validation rows show;
    docs/validation.md)."""
    enable_prefix_caching: bool = True
    """Reuse cached KV blocks of identical prompt prefixes (needs trace hashes; vLLM default)."""
    async_scheduling: bool = True
    """Form the next step while the previous one runs (vLLM's AsyncScheduler, on by default
    since vLLM 0.12): in-flight decodes are scheduled again from output placeholders, the host
    time of a step overlaps the step before it (a step lasts max(GPU, host)), and a request
    reaching the engine during step k joins step k+2 at the earliest, for open-loop and
    closed-loop arrivals alike. False: vLLM's synchronous engine loop (before 0.12)."""


@dataclass(frozen=True)
class SarathiScheduler:
    """Sarathi-Serve (Vidur's default): decodes first, then prefill chunks within
    chunk_size."""

    chunk_size: int = 512
    """Tokens per batch (decodes consume it but are never cut)."""
    batch_size_cap: int = 128
    """Most requests holding KV at once."""
    block_size: int = 16
    """Tokens per KV block."""
    watermark_blocks_fraction: float = 0.01
    """Blocks kept free when admitting new requests."""
    num_blocks: int | None = None
    """KV blocks per replica; None = Vidur's request-slot planner."""
    max_tokens: int = 4096
    """Per-request token bound the request-slot planner reserves for."""


@dataclass(frozen=True)
class VllmV0Scheduler:
    """vLLM v0 as Vidur models it: prefill-only batches of whole prompts first, else
    decodes."""

    batch_size_cap: int = 128
    """Most requests holding KV at once."""
    max_tokens_in_batch: int = 4096
    """Padded token bound of a prefill batch (requests x longest prompt)."""
    block_size: int = 16
    """Tokens per KV block."""
    watermark_blocks_fraction: float = 0.01
    """Blocks kept free when admitting new requests."""
    num_blocks: int | None = None
    """KV blocks per replica; None = Vidur's request-slot planner."""
    max_tokens: int = 4096
    """Per-request token bound the request-slot planner reserves for."""


@dataclass(frozen=True)
class OrcaScheduler:
    """Orca iteration-level batching: whole prompts, worst-case KV reservation per
    request."""

    batch_size_cap: int = 128
    """Most requests per batch."""
    block_size: int = 16
    """Tokens per KV block."""
    num_blocks: int | None = None
    """KV blocks per replica; None = Vidur's request-slot planner."""
    max_tokens: int = 4096
    """Per-request token bound (each request reserves this much KV)."""


@dataclass(frozen=True)
class FasterTransformerScheduler:
    """FasterTransformer request-level (static) batching."""

    batch_size_cap: int = 128
    """Most requests per batch."""
    block_size: int = 16
    """Tokens per KV block."""
    num_blocks: int | None = None
    """KV blocks per replica; None = Vidur's request-slot planner."""
    max_tokens: int = 4096
    """Per-request token bound (each request reserves this much KV)."""


@dataclass(frozen=True)
class LightLLMScheduler:
    """LightLLM as Vidur models it: whole-prompt prefill batches admitted by a
    future-memory estimate, else a decode step for every running request."""

    batch_size_cap: int = 128
    """Most requests holding KV at once."""
    max_tokens_in_batch: int = 4096
    """Prompt tokens per prefill batch."""
    max_waiting_iters: int = 10
    """Decode steps after which waiting requests get a prefill batch."""
    block_size: int = 1
    """Tokens per KV block; LightLLM accounts KV per token, so only 1 is allowed."""
    num_blocks: int | None = None
    """KV tokens per replica; None = Vidur's request-slot planner."""
    max_tokens: int = 4096
    """Per-request token bound the request-slot planner reserves for."""


Scheduler = (
    Annotated[VllmV1Scheduler, Subcommand("vllm_v1")]
    | Annotated[SarathiScheduler, Subcommand("sarathi")]
    | Annotated[VllmV0Scheduler, Subcommand("vllm")]
    | Annotated[OrcaScheduler, Subcommand("orca")]
    | Annotated[FasterTransformerScheduler, Subcommand("faster_transformer")]
    | Annotated[LightLLMScheduler, Subcommand("lightllm")]
)

# ---- routers ----


@dataclass(frozen=True)
class RoundRobinRouter:
    """Replica = request index mod replicas."""


@dataclass(frozen=True)
class RandomRouter:
    """Uniformly random replica (seeded)."""


@dataclass(frozen=True)
class LeastWaitingRouter:
    """Shortest waiting queue (running requests not counted; ties: lowest id), as
    Vidur main's `lor` router does."""


@dataclass(frozen=True)
class LeastOutstandingRequestsRouter:
    """Fewest requests routed and not finished (ties: lowest replica id)."""


@dataclass(frozen=True)
class DpLoadBalanceRouter:
    """vLLM's data-parallel front end, for attention-DP ranks (each replica one rank of
    predictor.attention_dp): the least waiting x 4 + running, from counts its coordinator
    publishes every 100 ms (every 5 s while none changes), each pick since adding one
    waiting request to its replica; ties go to the lowest id."""


@dataclass(frozen=True)
class LeastOutstandingPrefillRouter:
    """Fewest prompt tokens routed whose prefill has not completed (ties: lowest id)."""


@dataclass(frozen=True)
class StickyRouter:
    """All requests of a session go to the replica of its first request (chosen by
    lop); requests without a session go by lop. Needs session ids in the workload."""


@dataclass(frozen=True)
class PrefixAwareRouter:
    """Replica with the longest cached prefix of the prompt, among replicas whose
    outstanding prefill is within max_imbalance_tokens of the least loaded; no
    cached prefix anywhere = lop. Needs the vllm_v1 scheduler with prefix caching
    and a workload with block hashes."""

    max_imbalance_tokens: int = 16384
    """Outstanding prefill tokens a replica may have above the least loaded and still win."""


@dataclass(frozen=True)
class LopBinaryRouter:
    """Fewest requests routed whose prefill has not completed (Vidur canary's
    lop_binary)."""


@dataclass(frozen=True)
class LopBatchEndRouter:
    """Least load, where the load is prompt tokens routed less the prompt tokens of
    every batch the replica finished; tokens served from the prefix cache are never
    taken off, so cached replicas look busier (Vidur canary's lop_batch_end)."""


@dataclass(frozen=True)
class LopUncachedRouter:
    """Least imbalance of the loads (max - min) after adding the prompt tokens the
    replica does not hold in its prefix cache; those tokens are its load until the
    prefill completes (Vidur canary's lop_uncached)."""


@dataclass(frozen=True)
class StickyRoundRobinRouter:
    """Sessions pinned to a replica; new sessions (and requests without one) by round
    robin. Needs session ids in the workload."""


@dataclass(frozen=True)
class StickyLorRouter:
    """Sessions pinned to a replica; new sessions (and requests without one) by lor.
    Needs session ids in the workload."""


@dataclass(frozen=True)
class TolerantStickyLopUncachedRouter:
    """lop_uncached with sessions pinned while their replica's imbalance stays within
    tolerance_factor times the smallest; beyond it the session moves to the
    least-imbalance replica. Needs session ids in the workload."""

    tolerance_factor: float = 2.0
    """How much worse than the best the session's replica may be and keep it (> 0)."""


@dataclass(frozen=True)
class RankedStickyLopUncachedRouter:
    """lop_uncached with sessions pinned while their replica ranks among the top_k by
    imbalance; otherwise the session moves to the best. Needs session ids in the
    workload."""

    top_k: int = 2
    """How many best-ranked replicas keep a session (>= 1)."""


Router = (
    Annotated[RoundRobinRouter, Subcommand("round_robin")]
    | Annotated[RandomRouter, Subcommand("random")]
    | Annotated[LeastOutstandingRequestsRouter, Subcommand("lor")]
    | Annotated[LeastWaitingRouter, Subcommand("least_waiting")]
    | Annotated[DpLoadBalanceRouter, Subcommand("dp_lb")]
    | Annotated[LeastOutstandingPrefillRouter, Subcommand("lop")]
    | Annotated[StickyRouter, Subcommand("sticky")]
    | Annotated[PrefixAwareRouter, Subcommand("prefix_aware")]
    | Annotated[LopBinaryRouter, Subcommand("lop_binary")]
    | Annotated[LopBatchEndRouter, Subcommand("lop_batch_end")]
    | Annotated[LopUncachedRouter, Subcommand("lop_uncached")]
    | Annotated[StickyRoundRobinRouter, Subcommand("sticky_round_robin")]
    | Annotated[StickyLorRouter, Subcommand("sticky_lor")]
    | Annotated[TolerantStickyLopUncachedRouter, Subcommand("tolerant_sticky_lop_uncached")]
    | Annotated[RankedStickyLopUncachedRouter, Subcommand("ranked_sticky_lop_uncached")]
)

# routers that pin sessions, and so need session ids in the workload
SESSION_ROUTER_TYPES = (
    StickyRouter,
    StickyRoundRobinRouter,
    StickyLorRouter,
    TolerantStickyLopUncachedRouter,
    RankedStickyLopUncachedRouter,
)

# ---- cluster and outputs ----

POOL_ROLES = ("mixed", "prefill", "decode")


@dataclass(frozen=True)
class PoolConfig:
    """One pool of identical replicas: its GPU, parallel layout and replica count. The model is
    the cluster's; the scheduler and router are the cluster's unless the pool sets its own."""

    device: str = "h100"
    """GPU type."""
    node: str | None = None
    """Node type (interconnect); None = the usual node for the device."""
    tp: int = 1
    """Tensor-parallel GPUs per replica."""
    pp: int = 1
    """Pipeline stages per replica."""
    num_replicas: int = 1
    """Replicas in this pool."""
    role: str = "mixed"
    """What the pool serves: mixed (prefill and decode, as one replica of an aggregated
    cluster), prefill or decode (disaggregated serving, vllm_v1; docs/pools.md)."""
    scheduler: Scheduler | None = None
    """The pool's scheduler settings; None = the cluster's. The cluster's scheduler type,
    differing from it only in num_blocks and the batch limits (max_num_seqs,
    max_num_batched_tokens, long_prefill_token_threshold, max_num_partial_prefills,
    chunk_size; docs/pools.md)."""
    attention_dp: int | None = None
    """Attention data-parallel ranks whose tokens the pool's MoE layers run (MoE models; each
    replica is one rank, every attention_dp consecutive replicas of the pool one engine
    stepping in lockstep); None = predictor.attention_dp."""
    moe_ep: int | None = None
    """Expert-parallel ranks of the pool's MoE layers (MoE models); None = predictor.moe_ep."""
    router: Router | None = None
    """The router that picks among this pool's replicas; None = the cluster's. Beside other
    pools of its role the cluster router picks the pool (docs/pools.md)."""


# scheduler fields a pool may set for itself (the rest must equal the cluster's scheduler)
POOL_SCHEDULER_FIELDS = (
    "num_blocks",
    "max_num_seqs",
    "max_num_batched_tokens",
    "long_prefill_token_threshold",
    "max_num_partial_prefills",
    "chunk_size",
)


PD_DECIDERS = ("always", "never", "uncached_tokens_above")
KV_CONTENTION = ("none", "fair_share")
KV_PLACEMENT = ("packed", "separate_nodes")


@dataclass(frozen=True)
class KVTransferConfig:
    """The link KV blocks cross from a prefill to a decode replica (disaggregated serving)."""

    bandwidth_gbps: float | None = None
    """GB/s (10^9 bytes per second) per transfer between nodes (the network); None = the
    prefill pool's node's inter_node_bandwidth_gbps."""
    latency_us: float | None = None
    """Fixed cost of a transfer between nodes; None = the prefill pool's node's
    p2p_latency_us."""
    intra_node_bandwidth_gbps: float | None = None
    """GB/s per transfer between two replicas on one node (NVLink); None = the prefill pool's
    node's nvlink_bandwidth_gbps."""
    intra_node_latency_us: float | None = None
    """Fixed cost of a transfer inside a node; None = the prefill pool's node's
    p2p_latency_us (the catalog's one point-to-point latency figure)."""
    contention: str = "none"
    """none: every transfer has the whole bandwidth; fair_share: a prefill replica has two
    egress links, its node's NIC and its NVLink, and the transfers on one of them share its
    bandwidth equally while they overlap (processor sharing; the latency is not shared)."""
    placement: str = "packed"
    """packed: the pools' replicas are packed on nodes (docs/pools.md) and a prefill/decode
    pair on one node moves its KV over NVLink; separate_nodes: every replica on nodes of its
    own, every transfer over the network."""


# the ClusterConfig fields a pool sets for itself (cluster.pools replaces them)
POOL_FIELDS = ("device", "node", "tp", "pp", "num_replicas")


@dataclass(frozen=True)
class ClusterConfig:
    """What is deployed: model, GPU, parallelism, replicas."""

    model: str = "meta-llama/Meta-Llama-3-8B"
    """Catalog model name (see `vidur-fast profiles list`) or a path to a HF config.json."""
    device: str = "h100"
    """GPU type."""
    node: str | None = None
    """Node type (interconnect); None = the usual node for the device."""
    tp: int = 1
    """Tensor-parallel GPUs per replica."""
    pp: int = 1
    """Pipeline stages per replica."""
    num_replicas: int = 1
    """Identical replicas behind the router."""
    memory_margin_fraction: float = 0.1
    """GPU memory kept free by the planner."""
    pools: Suppress[tuple[PoolConfig, ...]] = ()
    """Heterogeneous cluster: a list of pools (config files only; docs/pools.md), their
    replicas behind the cluster's router (and a pool's own), numbered pool by pool. Empty =
    one pool made of device, node, tp, pp and num_replicas above; when given, those fields
    must stay at their defaults."""
    pd_decider: str = "always"
    """With prefill and decode pools: which requests are served disaggregated (the others go
    to the mixed pools): always, never, or uncached_tokens_above (prompts with more than
    pd_uncached_tokens_above tokens not in the prefix cache of the prefill replica the router
    picks; without prefix caching the whole prompt)."""
    pd_uncached_tokens_above: int = 0
    """The threshold of pd_decider uncached_tokens_above."""
    kv_transfer: KVTransferConfig = field(default_factory=KVTransferConfig)
    """Prefill-to-decode KV transfer link (PD pools only)."""
    memory_model: Literal["auto", "vidur", "vllm"] = "auto"
    """KV planner accounting: vidur (transformer-layer weights only) or vllm (also the
    embedding and LM head, tied or not, the profiled activation peak and communication buffers,
    vllm_v1 only); auto: vllm for the vllm_v1 scheduler, vidur for Vidur's schedulers. Weight
    and KV dtypes come from predictor.precision / kv_cache_dtype."""


@dataclass(frozen=True)
class OutputConfig:
    """Where and what to write."""

    dir: str | None = None
    """Run directory (used as given; the CLI picks runs/<timestamp> when unset)."""
    write_metrics_h5: bool = True
    """metrics.h5 with request, batch and replica tables."""
    write_request_csv: bool = True
    """request_metrics.csv with Vidur's per-request metric names."""
    write_parquet: bool = False
    """requests.parquet of the per-request metrics."""
    write_plots: bool = False
    """plots/*.png: latency CDFs, per-replica time series, per-replica TTFT."""
    write_trace: bool = False
    """trace.json (Chrome/Perfetto trace events): one track per replica and pipeline stage."""
    trace_every: int = 1
    """Draw every k-th batch of each replica in trace.json (1 = all)."""
    trace_start_s: float = 0.0
    """trace.json holds batches that end at or after this simulated time."""
    trace_end_s: float = 0.0
    """trace.json holds batches formed at or before this simulated time (0 = to the end)."""
    overwrite: bool = False
    """Replace an existing run directory."""
    vidur_plots: Literal["none", "main", "canary"] = "none"
    """Also write Vidur's plots/ CSV and JSON files (CDFs per request metric; canary: 101
    quantiles, per-replica copies and replica_prefix_cache_metrics.json), for scripts written
    against Vidur's outputs. vidur-compat sets it to the line of its command."""


@dataclass(frozen=True)
class SimConfig:
    """One simulation: cluster, workload, policies, timing model, outputs."""

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    workload: (
        Annotated[SyntheticWorkload, Subcommand("synthetic")]
        | Annotated[TraceWorkload, Subcommand("trace")]
        | Annotated[ClosedLoopWorkload, Subcommand("closed_loop")]
    ) = field(default_factory=SyntheticWorkload)
    scheduler: Scheduler = field(default_factory=VllmV1Scheduler)
    router: Router = field(default_factory=RoundRobinRouter)
    predictor: PredictorConfig = field(default_factory=PredictorConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    seed: int = 0
    """Seeds the workload and the random router; kernels are deterministic given inputs."""
    time_limit_s: float = 0.0
    """Stop simulating after this much simulated time (0 = run to completion)."""
    quiet: bool = False
    """No progress bar or summary table."""
    strict: bool = False
    """Fail up front when a request can never run (longer than the KV cache or the per-request
    token bound) instead of rejecting it and counting it in num_rejected."""


def cluster_pools(c: ClusterConfig) -> tuple[PoolConfig, ...]:
    """The pools of a cluster: cluster.pools, or the one mixed pool its own fields describe."""
    if c.pools:
        return tuple(c.pools)
    return (PoolConfig(c.device, c.node, c.tp, c.pp, c.num_replicas, "mixed", None),)


def pool_view(cfg: "SimConfig", pool: PoolConfig) -> "SimConfig":
    """The single-pool SimConfig of one pool: its cluster view, its scheduler and its expert
    split."""
    return replace(
        cfg,
        cluster=pool_cluster(cfg.cluster, pool),
        scheduler=pool.scheduler or cfg.scheduler,
        predictor=pool_predictor(cfg.predictor, pool),
    )


def pool_predictor(p: PredictorConfig, pool: PoolConfig) -> PredictorConfig:
    """The predictor of one pool: the cluster's, with the pool's attention_dp / moe_ep."""
    own = {f: getattr(pool, f) for f in ("attention_dp", "moe_ep") if getattr(pool, f) is not None}
    return replace(p, **own) if own else p


def pool_cluster(c: ClusterConfig, pool: PoolConfig) -> ClusterConfig:
    """The single-pool ClusterConfig of one pool (the cluster's model and memory settings)."""
    return replace(
        c,
        device=pool.device,
        node=pool.node,
        tp=pool.tp,
        pp=pool.pp,
        num_replicas=pool.num_replicas,
        pools=(),
    )
