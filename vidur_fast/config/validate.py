"""The one config validator: every rule on a config field's value lives here, and each error
names the field (`scheduler.max_num_seqs: must be > 0 (got 0)`).

`validate_config(cfg)` checks a whole SimConfig, in the order a reader meets the fields; the
per-section functions are public for the callers that take one section alone (the timing build
takes a PredictorConfig, the workload build a workload config, the writer an OutputConfig).
Rules that need the data a run derives (KV blocks from the memory plan, a trace's contents) stay
with the stage that derives it.
"""

import dataclasses
import math
from contextlib import contextmanager

from vidur_fast.catalog import default_node_for, get_device, get_model, get_node
from vidur_fast.catalog.arch import expert_format, moe_parallel
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.sim import (
    KV_CONTENTION,
    KV_PLACEMENT,
    PD_DECIDERS,
    POOL_FIELDS,
    POOL_ROLES,
    POOL_SCHEDULER_FIELDS,
    ClusterConfig,
    FasterTransformerScheduler,
    KVTransferConfig,
    LightLLMScheduler,
    OrcaScheduler,
    OutputConfig,
    PrefixAwareRouter,
    RankedStickyLopUncachedRouter,
    SarathiScheduler,
    SimConfig,
    TolerantStickyLopUncachedRouter,
    VllmV0Scheduler,
    VllmV1Scheduler,
    cluster_pools,
    pool_cluster,
    pool_predictor,
)
from vidur_fast.config.validate_workload import validate_workload
from vidur_fast.errors import ConfigError, UserError

# Per-replica state is O(replicas x pp x batch cap); bound it so a typo fails fast instead of
# exhausting memory.
MAX_REPLICAS = 1 << 16
MAX_BATCH_CAP = 1 << 20
MAX_STATE_CELLS = 1 << 27
# Largest decode or prefill grid accepted (cells); 2**27 float64 cells is 1 GiB.
MAX_GRID_CELLS = 2**27


def validate_config(cfg: SimConfig) -> None:
    """Raise ConfigError naming the first invalid field of cfg; return None when all are valid."""
    validate_predictor(cfg.predictor)
    validate_pools(cfg.cluster)
    for k, pool in enumerate(cluster_pools(cfg.cluster)):
        _check_pool_scheduler(cfg, k, pool)
        c = pool_cluster(cfg.cluster, pool)
        with pool_errors(cfg.cluster, k):
            validate_cluster(c)
            validate_expert_parallelism(c, pool_predictor(cfg.predictor, pool))
            validate_scheduler(pool.scheduler or cfg.scheduler, c)
            validate_lockstep(c, pool_predictor(cfg.predictor, pool))
    validate_router(cfg)
    validate_pd(cfg)
    if not (math.isfinite(cfg.time_limit_s) and cfg.time_limit_s >= 0):
        raise ConfigError(f"time_limit_s: must be a finite number >= 0 (got {cfg.time_limit_s})")
    validate_workload(cfg.workload)
    validate_output(cfg.output)


def _at_most(path: str, value: int, high: int) -> None:
    if value is not None and value > high:
        raise ConfigError(f"{path}: must be <= {high} (got {value})")


def _positive(path: str, value, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise ConfigError(f"{path}: must be > 0 (got {value})")


def _at_least_zero(path: str, value) -> None:
    if value < 0:
        raise ConfigError(f"{path}: must be >= 0 (got {value})")


def _fraction(path: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{path}: must be in [0, 1) (got {value})")


# ---- cluster ----


def validate_cluster(c: ClusterConfig) -> None:
    """Replica count and memory fields, then the catalog names and the parallel layout."""
    _positive("cluster.num_replicas", c.num_replicas)
    _at_most("cluster.num_replicas", c.num_replicas, MAX_REPLICAS)
    _fraction("cluster.memory_margin_fraction", c.memory_margin_fraction)
    if c.memory_model not in ("auto", "vidur", "vllm"):
        raise ConfigError(
            f"cluster.memory_model: must be one of auto, vidur, vllm (got {c.memory_model!r})"
        )
    model = get_model(c.model)
    # MLA models are read, counted and planned, but not timed yet: refuse them here rather
    # than simulate them with another attention
    model.check_modelled("cluster.model")
    device = get_device(c.device)
    get_node(c.node or default_node_for(device.name))
    model.check_parallelism(c.tp, c.pp)


def validate_expert_parallelism(c: ClusterConfig, p: PredictorConfig) -> None:
    """moe_ep and attention_dp against the model: a MoE model's split must be formable
    (moe_ep divides the experts, moe_tp x moe_ep = tp x attention_dp); a dense model takes
    neither (its data parallelism is cluster.num_replicas)."""
    model = get_model(c.model)
    if model.moe is None:
        for name in ("moe_ep", "attention_dp"):
            if getattr(p, name) != 1:
                raise ConfigError(
                    f"predictor.{name}: {model.name} has no MoE layers (got {getattr(p, name)}; "
                    "replicate a dense model with cluster.num_replicas)"
                )
        return
    moe_parallel(model, c.tp, p.attention_dp, p.moe_ep, expert_format(model, p.precision))


def validate_lockstep(c: ClusterConfig, p: PredictorConfig) -> None:
    """predictor.attention_dp > 1 on a MoE model (c and p: one pool's view): consecutive groups
    of that many replicas of the pool are the DP ranks of one engine, which step in lockstep;
    the replicas must form whole engines, and the ranks run one pipeline stage."""
    dp = p.attention_dp
    if dp == 1 or get_model(c.model).moe is None:
        return
    if c.num_replicas % dp:
        raise ConfigError(
            f"cluster.num_replicas: {c.num_replicas} is not a multiple of predictor.attention_dp "
            f"{dp} (each replica is one DP rank; give engines x attention_dp replicas)"
        )
    if c.pp != 1:
        raise ConfigError(
            f"cluster.pp: attention data parallelism (predictor.attention_dp {dp}) is modelled "
            f"with one pipeline stage (got pp {c.pp})"
        )


def validate_pools(c: ClusterConfig) -> None:
    """cluster.pools: each pool's role and replica count; with pools the cluster's own
    placement fields stay at their defaults (each pool sets its own)."""
    if not c.pools:
        return
    default = ClusterConfig()
    for f in POOL_FIELDS:
        if getattr(c, f) != getattr(default, f):
            raise ConfigError(
                f"cluster.{f}: set per pool when cluster.pools is given "
                f"(cluster.pools[k].{f}; got {getattr(c, f)!r})"
            )
    total = 0
    for k, pool in enumerate(c.pools):
        if pool.role not in POOL_ROLES:
            raise ConfigError(
                f"cluster.pools[{k}].role: unknown role {pool.role!r}; one of "
                f"{', '.join(POOL_ROLES)}"
            )
        if pool.num_replicas <= 0:
            raise ConfigError(
                f"cluster.pools[{k}].num_replicas: must be > 0 (got {pool.num_replicas})"
            )
        total += pool.num_replicas
    _at_most("cluster.pools: total num_replicas", total, MAX_REPLICAS)


def is_pd(c: ClusterConfig) -> bool:
    """Whether the cluster has prefill/decode pools (disaggregated serving)."""
    return any(p.role in ("prefill", "decode") for p in c.pools)


def has_route_groups(c: ClusterConfig) -> bool:
    """Whether the engine routes by per-role route groups (kernels/pd.py PDState): with
    prefill/decode pools, or pools with routers of their own."""
    return is_pd(c) or any(p.router is not None for p in c.pools)


def validate_pd(cfg: SimConfig) -> None:
    """Disaggregated serving: prefill and decode pools, the decider, the transfer link, and
    what the flow supports yet (vllm_v1); mixed pools beside them take what the decider does
    not disaggregate."""
    c = cfg.cluster
    x = c.kv_transfer
    if not is_pd(c):
        if c.pd_decider != "always" or c.pd_uncached_tokens_above != 0:
            raise ConfigError(
                f"cluster.pd_decider: only used with prefill and decode pools (got "
                f"{c.pd_decider!r}, pd_uncached_tokens_above {c.pd_uncached_tokens_above})"
            )
        if x != KVTransferConfig():
            raise ConfigError("cluster.kv_transfer: only used with prefill and decode pools")
        return
    roles = [p.role for p in c.pools]
    for role in ("prefill", "decode"):
        if role not in roles:
            raise ConfigError(
                f"cluster.pools: a disaggregated cluster needs a {role} pool (roles: "
                f"{', '.join(roles)})"
            )
    if c.pd_decider not in PD_DECIDERS:
        raise ConfigError(
            f"cluster.pd_decider: unknown decider {c.pd_decider!r}; one of {', '.join(PD_DECIDERS)}"
        )
    t = c.pd_uncached_tokens_above
    if isinstance(t, bool) or not isinstance(t, int) or t < 0:
        raise ConfigError(f"cluster.pd_uncached_tokens_above: must be an integer >= 0 (got {t!r})")
    if t != 0 and c.pd_decider != "uncached_tokens_above":
        raise ConfigError(
            "cluster.pd_uncached_tokens_above: only used with pd_decider uncached_tokens_above"
        )
    if "mixed" in roles and c.pd_decider == "always":
        k = roles.index("mixed")
        raise ConfigError(
            f"cluster.pools[{k}].role: a mixed pool gets no requests with pd_decider always; "
            "use never or uncached_tokens_above"
        )
    if "mixed" not in roles and c.pd_decider != "always":
        raise ConfigError(
            f"cluster.pd_decider: {c.pd_decider} sends requests to mixed pools; the cluster "
            "has none"
        )
    if x.contention not in KV_CONTENTION:
        raise ConfigError(
            f"cluster.kv_transfer.contention: unknown model {x.contention!r}; one of "
            f"{', '.join(KV_CONTENTION)}"
        )
    if x.placement not in KV_PLACEMENT:
        raise ConfigError(
            f"cluster.kv_transfer.placement: unknown placement {x.placement!r}; one of "
            f"{', '.join(KV_PLACEMENT)}"
        )
    for name in (
        "bandwidth_gbps",
        "latency_us",
        "intra_node_bandwidth_gbps",
        "intra_node_latency_us",
    ):
        v = getattr(x, name)
        if v is None:
            continue
        low = v > 0 if name.endswith("bandwidth_gbps") else v >= 0
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not low:
            bound = "> 0" if name.endswith("bandwidth_gbps") else ">= 0"
            raise ConfigError(
                f"cluster.kv_transfer.{name}: must be a finite number {bound} (got {v!r})"
            )
    s = cfg.scheduler
    if not isinstance(s, VllmV1Scheduler):
        raise ConfigError(
            "scheduler: prefill/decode pools are simulated with the vllm_v1 scheduler only "
            f"(got {type(s).__name__})"
        )


def _check_pool_scheduler(cfg: SimConfig, k: int, pool) -> None:
    """A pool's own scheduler: the cluster's type, other fields only in POOL_SCHEDULER_FIELDS."""
    s = pool.scheduler
    if s is None:
        return
    if type(s) is not type(cfg.scheduler):
        raise ConfigError(
            f"cluster.pools[{k}].scheduler: must be the cluster's scheduler type "
            f"({type(cfg.scheduler).__name__}; got {type(s).__name__})"
        )
    for f in dataclasses.fields(s):
        mine, theirs = getattr(s, f.name), getattr(cfg.scheduler, f.name)
        if f.name not in POOL_SCHEDULER_FIELDS and mine != theirs:
            raise ConfigError(
                f"cluster.pools[{k}].scheduler.{f.name}: must equal scheduler.{f.name} "
                f"({theirs!r}; got {mine!r}); a pool may set only "
                f"{', '.join(x for x in POOL_SCHEDULER_FIELDS if hasattr(s, x))}"
            )


@contextmanager
def pool_errors(c: ClusterConfig, k: int):
    """User errors raised on pool k's single-pool view (its config, catalog names, timing
    data) name that pool: `cluster.tp: ...` becomes `cluster.pools[k].tp: ...`, any other
    gets a `cluster.pools[k] (device): ` prefix; the error keeps its class. Nothing changes
    for a cluster without pools."""
    try:
        yield
    except UserError as exc:
        if not c.pools:
            raise
        msg = str(exc)
        for f in (*POOL_FIELDS, "tp/pp"):
            if msg.startswith(f"cluster.{f}:"):
                raise type(exc)(f"cluster.pools[{k}].{msg[len('cluster.') :]}") from None
        pool = c.pools[k]
        if pool.attention_dp is not None or pool.moe_ep is not None:  # the pool's expert split
            for f in ("attention_dp", "moe_ep", "moe_ep/attention_dp"):
                if msg.startswith(f"predictor.{f}:"):
                    raise type(exc)(f"cluster.pools[{k}].{msg[len('predictor.') :]}") from None
        raise type(exc)(f"cluster.pools[{k}] ({c.pools[k].device}): {msg}") from None


# ---- scheduler ----


def _check_state_size(c: ClusterConfig, cap_path: str, cap: int) -> None:
    _at_most(cap_path, cap, MAX_BATCH_CAP)
    cells = c.num_replicas * c.pp * (2 * cap + 2)
    if cells > MAX_STATE_CELLS:
        raise ConfigError(
            f"{cap_path}: cluster.num_replicas x pp x {cap_path.split('.')[-1]} needs {cells} "
            f"batch slots, more than {MAX_STATE_CELLS}"
        )


def validate_scheduler(s, c: ClusterConfig) -> None:
    """The scheduler's own fields and the cluster layouts it supports."""
    _positive("scheduler.block_size", s.block_size)
    _positive("scheduler.num_blocks", s.num_blocks, allow_none=True)
    match s:
        case VllmV1Scheduler():
            if c.pp != 1:
                raise ConfigError("cluster.pp: the vllm_v1 scheduler supports pp = 1 only")
            _positive("scheduler.max_num_batched_tokens", s.max_num_batched_tokens)
            _positive("scheduler.max_num_seqs", s.max_num_seqs)
            _check_state_size(c, "scheduler.max_num_seqs", s.max_num_seqs)
            _at_least_zero("scheduler.long_prefill_token_threshold", s.long_prefill_token_threshold)
            _positive("scheduler.max_model_len", s.max_model_len, allow_none=True)
            _at_least_zero("scheduler.max_num_partial_prefills", s.max_num_partial_prefills)
        case LightLLMScheduler():
            if c.pp != 1:
                raise ConfigError("cluster.pp: the lightllm scheduler supports pp = 1 only")
            if s.block_size != 1:
                raise ConfigError(
                    "scheduler.block_size: lightllm accounts KV per token; must be 1 "
                    f"(got {s.block_size})"
                )
            _positive("scheduler.batch_size_cap", s.batch_size_cap)
            _positive("scheduler.max_tokens", s.max_tokens)
            _positive("scheduler.max_tokens_in_batch", s.max_tokens_in_batch)
            _positive("scheduler.max_waiting_iters", s.max_waiting_iters)
        case (
            SarathiScheduler() | VllmV0Scheduler() | OrcaScheduler() | FasterTransformerScheduler()
        ):
            _positive("scheduler.batch_size_cap", s.batch_size_cap)
            _check_state_size(c, "scheduler.batch_size_cap", s.batch_size_cap)
            _positive("scheduler.max_tokens", s.max_tokens)
            if s.batch_size_cap < c.pp:
                raise ConfigError(
                    f"scheduler.batch_size_cap: must be >= pp ({c.pp}) (got {s.batch_size_cap})"
                )
            if c.memory_model not in ("auto", "vidur"):
                raise ConfigError(
                    f"cluster.memory_model: {c.memory_model!r} needs scheduler vllm_v1 "
                    "(the request-slot planner is Vidur's)"
                )
            if isinstance(s, SarathiScheduler | VllmV0Scheduler):
                _fraction("scheduler.watermark_blocks_fraction", s.watermark_blocks_fraction)
            if isinstance(s, SarathiScheduler):
                _positive("scheduler.chunk_size", s.chunk_size)
            if isinstance(s, VllmV0Scheduler):
                _positive("scheduler.max_tokens_in_batch", s.max_tokens_in_batch)
        case _:
            raise ConfigError(f"scheduler: unknown scheduler {s!r}")


# ---- router ----


def validate_router(cfg: SimConfig) -> None:
    """Router fields, and what the router needs from the scheduler: the cluster's and each
    pool's own."""
    _check_router(cfg, cfg.router, "router")
    for k, pool in enumerate(cfg.cluster.pools):
        if pool.router is not None:
            _check_router(cfg, pool.router, f"cluster.pools[{k}].router")


def _check_router(cfg: SimConfig, router, path: str) -> None:
    if isinstance(router, TolerantStickyLopUncachedRouter):
        f = router.tolerance_factor
        if not (isinstance(f, int | float) and math.isfinite(f) and f > 0):
            raise ConfigError(f"{path}.tolerance_factor: must be a finite number > 0 (got {f})")
    if isinstance(router, RankedStickyLopUncachedRouter):
        k = router.top_k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"{path}.top_k: must be an integer >= 1 (got {k!r})")
    if isinstance(router, PrefixAwareRouter):
        s = cfg.scheduler
        if not (isinstance(s, VllmV1Scheduler) and s.enable_prefix_caching):
            raise ConfigError(
                f"{path}: prefix_aware needs the vllm_v1 scheduler with enable_prefix_caching=True"
            )
        _at_least_zero(f"{path}.max_imbalance_tokens", router.max_imbalance_tokens)


# ---- outputs ----


def validate_output(out: OutputConfig) -> None:
    """Field rules of the output options (whether the directory can be written is the
    writer's check, made before the run)."""
    if out.vidur_plots not in ("none", "main", "canary"):
        raise ConfigError(
            f"output.vidur_plots: must be one of none, main, canary (got {out.vidur_plots!r})"
        )
    if out.trace_every < 1:
        raise ConfigError(f"output.trace_every: must be >= 1 (got {out.trace_every})")
    if not out.trace_start_s >= 0:
        raise ConfigError(f"output.trace_start_s: must be >= 0 (got {out.trace_start_s})")
    if not (out.trace_end_s == 0 or out.trace_end_s > out.trace_start_s):
        raise ConfigError(
            f"output.trace_end_s: must be 0 (no end) or > trace_start_s (got {out.trace_end_s})"
        )


# ---- predictor ----


_CHOICES = {
    "source": ("aiconfigurator", "vidur", "roofline"),
    "backend": ("vllm", "trtllm", "sglang"),
    "precision": ("bf16", "fp8", "fp8_block", "nvfp4"),
    "kv_cache_dtype": ("bf16", "fp16", "fp8"),
    "decode_attention_kv_dtype": ("", "bf16", "fp16", "fp8"),
    "regressor": ("random_forest", "polynomial"),
    "kv_rule": ("per_request", "sum"),
    "cache_mode": ("use", "ignore", "require", "refresh"),
    "moe_routing": ("power_law_1.2", "power_law_1.01", "balanced"),
}

# field -> smallest allowed value
_INT_MIN = {
    "n_estimators": 1,
    "min_samples_split": 2,
    "random_state": 0,
    "polynomial_degree": 1,
    "max_tokens": 8,
    "max_batch_size": 1,
    "max_prefill_chunk": 1,
    "kv_granularity": 1,
    "chunk_granularity": 1,
    "moe_ep": 1,
    "attention_dp": 1,
    "graph_max_tokens": 0,
}

_NONNEG_FLOATS = (
    "decode_batching_overhead",
    "prefill_batching_overhead",
    "nccl_launch_overhead_ms",
    "cpu_overhead_ms",
    "cpu_overhead_per_seq_ms",
    "sampler_ms",
    "sampler_per_seq_ms",
    "eager_launch_ms_per_layer",
)
# None = the engine's default (config/engine.py)
_OPTIONAL_INTS = ("graph_max_tokens",)
_OPTIONAL_FLOATS = ("sampler_ms", "sampler_per_seq_ms", "eager_launch_ms_per_layer")


def _fail_predictor(field: str, why: str, value: object) -> None:
    raise ConfigError(f"predictor.{field}: {why} (got {value!r})")


def validate_predictor(cfg: PredictorConfig) -> None:
    """Raise ConfigError naming the first bad field of the predictor config."""
    for name, allowed in _CHOICES.items():
        value = getattr(cfg, name)
        if value not in allowed:
            _fail_predictor(name, f"must be one of {', '.join(allowed)}", value)
    for name, low in _INT_MIN.items():
        value = getattr(cfg, name)
        if value is None and name in _OPTIONAL_INTS:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            _fail_predictor(name, "must be an integer", value)
        if value < low:
            _fail_predictor(name, f"must be >= {low}", value)
    if not isinstance(cfg.work_normalized, bool):
        _fail_predictor("work_normalized", "must be True or False", cfg.work_normalized)
    if not isinstance(cfg.vidur_forests, bool):
        _fail_predictor("vidur_forests", "must be True or False", cfg.vidur_forests)
    if cfg.vidur_forests and (cfg.regressor != "random_forest" or cfg.work_normalized):
        _fail_predictor(
            "vidur_forests",
            "needs regressor random_forest and work_normalized false",
            cfg.vidur_forests,
        )
    if cfg.max_depth is not None and (not isinstance(cfg.max_depth, int) or cfg.max_depth < 1):
        _fail_predictor("max_depth", "must be None or an integer >= 1", cfg.max_depth)
    if cfg.polynomial_degree > 6:
        _fail_predictor("polynomial_degree", "must be <= 6", cfg.polynomial_degree)
    for name in _NONNEG_FLOATS:
        value = getattr(cfg, name)
        if value is None and name in _OPTIONAL_FLOATS:
            continue
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            _fail_predictor(name, "must be a finite number >= 0", value)
    if cfg.kv_granularity > cfg.max_tokens:
        _fail_predictor(
            "kv_granularity", f"must be <= max_tokens ({cfg.max_tokens})", cfg.kv_granularity
        )
    if cfg.chunk_granularity > cfg.max_prefill_chunk:
        _fail_predictor(
            "chunk_granularity",
            f"must be <= max_prefill_chunk ({cfg.max_prefill_chunk})",
            cfg.chunk_granularity,
        )
    if (cfg.max_batch_size + 1) * cfg.n_kv > MAX_GRID_CELLS:
        _fail_predictor(
            "max_batch_size",
            f"decode grid of {cfg.max_batch_size + 1} x {cfg.n_kv} cells exceeds {MAX_GRID_CELLS}",
            cfg.max_batch_size,
        )
    if cfg.n_kv * cfg.n_chunk > MAX_GRID_CELLS:
        _fail_predictor(
            "chunk_granularity",
            f"prefill grid of {cfg.n_kv} x {cfg.n_chunk} cells exceeds {MAX_GRID_CELLS}; "
            "raise the granularities or lower max_tokens/max_prefill_chunk",
            cfg.chunk_granularity,
        )
    if cfg.profile_dir is not None and not cfg.profile_dir:
        _fail_predictor("profile_dir", "must be a directory path or None", cfg.profile_dir)
