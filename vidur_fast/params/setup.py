"""A validated config -> kernel parameters (SchedParams, KV capacity, up-front rejections)."""

from dataclasses import dataclass, replace

import numpy as np

from vidur_fast.catalog import DeviceSpec, ModelSpec
from vidur_fast.config.engine import memory_model
from vidur_fast.config.sim import (
    DpLoadBalanceRouter,
    FasterTransformerScheduler,
    LeastOutstandingPrefillRouter,
    LeastOutstandingRequestsRouter,
    LeastWaitingRouter,
    LightLLMScheduler,
    LopBatchEndRouter,
    LopBinaryRouter,
    LopUncachedRouter,
    OrcaScheduler,
    PrefixAwareRouter,
    RandomRouter,
    RankedStickyLopUncachedRouter,
    RoundRobinRouter,
    SarathiScheduler,
    SimConfig,
    StickyLorRouter,
    StickyRoundRobinRouter,
    StickyRouter,
    TolerantStickyLopUncachedRouter,
    VllmV0Scheduler,
    VllmV1Scheduler,
    pool_view,
)
from vidur_fast.errors import ConfigError
from vidur_fast.kernels.codes import RouterPolicy, SchedPolicy
from vidur_fast.kernels.state import SchedParams, block_shift_of
from vidur_fast.params.memory import (
    MemoryPlan,
    plan_request_slots,
    plan_tokens,
    vllm_runtime_bytes,
)

# reasons in Reqs.rejected
REJECT_NONE = 0
REJECT_KV_CAPACITY = 1  # needs more KV blocks than the replica has
REJECT_MAX_LEN = 2  # longer than the scheduler's per-request token bound
REJECT_BATCH_TOKENS = 3  # prompt longer than a whole prefill batch may be (vllm v0)
REJECT_REASONS = {
    REJECT_KV_CAPACITY: "needs more KV blocks than a replica has",
    REJECT_MAX_LEN: "longer than the per-request token bound (max_model_len / max_tokens)",
    REJECT_BATCH_TOKENS: "prompt longer than scheduler.max_tokens_in_batch",
}


@dataclass(frozen=True)
class EngineSetup:
    params: SchedParams
    plan: MemoryPlan
    profile_block_size: int  # block size of the timing profiles and workload hashes (LightLLM:
    # 16, while its KV is accounted per token: params.block_size 1)
    max_seq_len: int  # per-request bound on prompt + output (0 = none)


def scheduler_policy(s) -> SchedPolicy:
    """The kernels' code (SchedParams.policy) of a scheduler config."""
    return {
        VllmV1Scheduler: SchedPolicy.VLLM_V1,
        LightLLMScheduler: SchedPolicy.LIGHTLLM,
        SarathiScheduler: SchedPolicy.SARATHI,
        VllmV0Scheduler: SchedPolicy.VLLM,
        OrcaScheduler: SchedPolicy.ORCA,
        FasterTransformerScheduler: SchedPolicy.FASTER_TRANSFORMER,
    }[type(s)]


def router_code(cfg: SimConfig) -> int:
    return router_policy(cfg.router, "router")


def router_policy(router, path: str) -> int:
    """The RouterPolicy of a config router (path names the field in the error)."""
    match router:
        case RoundRobinRouter():
            return RouterPolicy.ROUND_ROBIN
        case RandomRouter():
            return RouterPolicy.RANDOM
        case LeastWaitingRouter():
            return RouterPolicy.LEAST_WAITING
        case LeastOutstandingRequestsRouter():
            return RouterPolicy.LOR
        case DpLoadBalanceRouter():
            return RouterPolicy.DP_LB
        case LeastOutstandingPrefillRouter():
            return RouterPolicy.LOP
        case StickyRouter():
            return RouterPolicy.STICKY
        case PrefixAwareRouter():
            return RouterPolicy.PREFIX_AWARE
        case LopBinaryRouter():
            return RouterPolicy.LOP_BINARY
        case LopBatchEndRouter():
            return RouterPolicy.LOP_BATCH_END
        case LopUncachedRouter():
            return RouterPolicy.LOP_UNCACHED
        case StickyRoundRobinRouter():
            return RouterPolicy.STICKY_ROUND_ROBIN
        case StickyLorRouter():
            return RouterPolicy.STICKY_LOR
        case TolerantStickyLopUncachedRouter():
            return RouterPolicy.TOLERANT_STICKY_LOP_UNCACHED
        case RankedStickyLopUncachedRouter():
            return RouterPolicy.RANKED_STICKY_LOP_UNCACHED
    raise ConfigError(f"{path}: unknown router {router!r}")


def _memory_args(cfg: SimConfig, model: ModelSpec) -> dict:
    """Token-planner dtypes and, for memory_model vllm, the vLLM runtime reserve."""
    out = dict(weight_dtype=cfg.predictor.precision, kv_dtype=cfg.predictor.kv_cache_dtype)
    if model.moe is not None:
        out.update(ep=cfg.predictor.moe_ep, dp=cfg.predictor.attention_dp)
    if memory_model(cfg) == "vllm":
        s = cfg.scheduler
        out["embeddings"] = True
        out["runtime_bytes"] = vllm_runtime_bytes(
            model, cfg.cluster.tp, s.max_num_batched_tokens, s.max_num_seqs
        )
    return out


def _router_settings(cfg: SimConfig) -> dict:
    """The router's own knobs (defaults of SchedParams when the router has none)."""
    out = {}
    if isinstance(cfg.router, TolerantStickyLopUncachedRouter):
        out["router_tolerance_factor"] = float(cfg.router.tolerance_factor)
    if isinstance(cfg.router, RankedStickyLopUncachedRouter):
        out["router_top_k"] = int(cfg.router.top_k)
    return out


def _router_imbalance(cfg: SimConfig) -> int:
    if isinstance(cfg.router, PrefixAwareRouter):
        return cfg.router.max_imbalance_tokens
    return 0


def router_knobs(router, path: str) -> tuple:
    """(RouterPolicy, tolerance_factor, top_k, max_imbalance_tokens) of a config router, the
    SchedParams defaults for knobs it does not have (kernels/router.py route_groups)."""
    d = SchedParams._field_defaults
    return (
        router_policy(router, path),
        float(getattr(router, "tolerance_factor", d["router_tolerance_factor"])),
        int(getattr(router, "top_k", d["router_top_k"])),
        int(getattr(router, "max_imbalance_tokens", 0)),
    )


def lockstep_group(cfg: SimConfig, model: ModelSpec) -> int:
    """SchedParams.dp_group: the attention-DP ranks of one engine that step in lockstep
    (consecutive replicas of a pool are the ranks of one engine); 1 for dense models. cfg: a
    cluster of one pool, or one pool's view (config.sim.pool_view)."""
    if model.moe is None:
        return 1
    return cfg.predictor.attention_dp


def lockstep_on(cfg: SimConfig, model: ModelSpec) -> bool:
    """Whether any pool of the cluster has DP engines stepping in lockstep (the loop variant
    that forms their steps together)."""
    views = [pool_view(cfg, pool) for pool in cfg.cluster.pools] or [cfg]
    return any(lockstep_group(v, model) > 1 for v in views)


def build_setup(cfg: SimConfig, model: ModelSpec, device: DeviceSpec) -> EngineSetup:
    """Kernel parameters of a validated config (config.validate.validate_config)."""
    setup = _policy_setup(cfg, model, device)
    shift = block_shift_of(setup.params.block_size)
    return replace(setup, params=setup.params._replace(block_shift=shift))


def _policy_setup(cfg: SimConfig, model: ModelSpec, device: DeviceSpec) -> EngineSetup:
    c = cfg.cluster
    s = cfg.scheduler
    common = dict(router=int(router_code(cfg)), num_replicas=c.num_replicas, pp=c.pp)
    common.update(_router_settings(cfg))
    margin = c.memory_margin_fraction
    match s:
        case VllmV1Scheduler():
            plan = plan_tokens(
                model, device, c.tp, c.pp, s.block_size, margin, **_memory_args(cfg, model)
            )
            blocks = s.num_blocks if s.num_blocks is not None else plan.num_blocks
            if blocks < 2:
                raise ConfigError(f"scheduler.num_blocks: must be >= 2 (got {blocks})")
            max_len = s.max_model_len or model.max_position_embeddings
            p = SchedParams(
                policy=int(SchedPolicy.VLLM_V1),
                block_size=s.block_size,
                # NOTE(vllm): block 0 is the reserved null block
                usable_blocks=blocks - 1,
                watermark_blocks=0,
                batch_size_cap=0,
                batch_size_cap_per_stage=0,
                planned_batch_size=0,
                chunk_size=0,
                max_tokens_in_batch=0,
                max_blocks_per_seq=0,
                max_waiting_iters=0,
                max_num_seqs=s.max_num_seqs,
                max_num_batched_tokens=s.max_num_batched_tokens,
                long_prefill_token_threshold=s.long_prefill_token_threshold,
                max_model_len=max_len,
                reserve_full_sequence=int(s.reserve_full_sequence),
                max_num_partial_prefills=s.max_num_partial_prefills,
                enable_prefix_caching=int(s.enable_prefix_caching),
                max_imbalance_tokens=_router_imbalance(cfg),
                async_scheduling=int(s.async_scheduling),
                **common,
            )
            return EngineSetup(p, plan, s.block_size, max_len)
        case LightLLMScheduler():
            return _lightllm_setup(s, c, model, device, common)
        case (
            SarathiScheduler() | VllmV0Scheduler() | OrcaScheduler() | FasterTransformerScheduler()
        ):
            plan = plan_request_slots(
                model,
                device,
                c.tp,
                c.pp,
                s.block_size,
                s.max_tokens,
                margin,
                weight_dtype=cfg.predictor.precision,
                kv_dtype=cfg.predictor.kv_cache_dtype,
            )
            blocks = s.num_blocks if s.num_blocks is not None else plan.num_blocks
            wm_frac = getattr(s, "watermark_blocks_fraction", 0.0)
            chunk = getattr(s, "chunk_size", 0)
            max_in_batch = getattr(s, "max_tokens_in_batch", 0)
            policy = {
                SarathiScheduler: SchedPolicy.SARATHI,
                VllmV0Scheduler: SchedPolicy.VLLM,
                OrcaScheduler: SchedPolicy.ORCA,
                FasterTransformerScheduler: SchedPolicy.FASTER_TRANSFORMER,
            }[type(s)]
            max_blocks_per_seq = s.max_tokens // s.block_size
            if policy in (SchedPolicy.ORCA, SchedPolicy.FASTER_TRANSFORMER):
                if max_blocks_per_seq > blocks:
                    raise ConfigError(
                        f"scheduler.max_tokens: one request reserves {max_blocks_per_seq} blocks "
                        f"but a replica has {blocks}"
                    )
            p = SchedParams(
                policy=int(policy),
                block_size=s.block_size,
                usable_blocks=blocks,
                watermark_blocks=int(wm_frac * blocks),
                batch_size_cap=s.batch_size_cap,
                batch_size_cap_per_stage=s.batch_size_cap // c.pp,
                planned_batch_size=max(1, min(plan.max_batch_size, s.batch_size_cap)),
                chunk_size=chunk,
                max_tokens_in_batch=max_in_batch,
                max_blocks_per_seq=max_blocks_per_seq,
                max_waiting_iters=0,
                max_num_seqs=0,
                max_num_batched_tokens=0,
                long_prefill_token_threshold=0,
                max_model_len=0,
                reserve_full_sequence=0,
                **common,
            )
            bound = (
                s.max_tokens if policy in (SchedPolicy.ORCA, SchedPolicy.FASTER_TRANSFORMER) else 0
            )
            return EngineSetup(p, plan, s.block_size, bound)
    raise ConfigError(f"scheduler: unknown scheduler {s!r}")


# NOTE(fix): LightLLM accounts KV per token, but its timing rows come from the usual 16-token
# block profiles; Vidur filtered the attention profile by block size 1 and found nothing.
LIGHTLLM_PROFILE_BLOCK_SIZE = 16


def _lightllm_setup(s: LightLLMScheduler, c, model: ModelSpec, device: DeviceSpec, common):
    plan = plan_request_slots(model, device, c.tp, c.pp, 1, s.max_tokens, c.memory_margin_fraction)
    blocks = s.num_blocks if s.num_blocks is not None else plan.num_blocks
    p = SchedParams(
        policy=int(SchedPolicy.LIGHTLLM),
        block_size=1,
        usable_blocks=blocks,
        watermark_blocks=0,
        batch_size_cap=s.batch_size_cap,
        batch_size_cap_per_stage=s.batch_size_cap,  # pp = 1
        planned_batch_size=0,
        chunk_size=0,
        max_tokens_in_batch=s.max_tokens_in_batch,
        max_blocks_per_seq=0,
        max_waiting_iters=s.max_waiting_iters,
        max_num_seqs=0,
        max_num_batched_tokens=0,
        long_prefill_token_threshold=0,
        max_model_len=0,
        reserve_full_sequence=0,
        **common,
    )
    return EngineSetup(p, plan, LIGHTLLM_PROFILE_BLOCK_SIZE, 0)


def rejection_codes(prompt: np.ndarray, decode: np.ndarray, setup: EngineSetup) -> np.ndarray:
    """Requests that could never run on a replica (rejected up front instead of hanging)."""
    p = setup.params
    bs = p.block_size
    total = prompt + decode
    out = np.zeros(prompt.shape[0], dtype=np.uint8)
    if setup.max_seq_len > 0:
        out[total > setup.max_seq_len] = REJECT_MAX_LEN
    blocks_total = -(-total // bs)
    blocks_prompt = -(-prompt // bs)
    if p.policy in (SchedPolicy.SARATHI, SchedPolicy.VLLM):
        too_big = (blocks_prompt > p.usable_blocks - p.watermark_blocks) | (
            blocks_total > p.usable_blocks
        )
    elif p.policy == SchedPolicy.VLLM_V1:
        too_big = blocks_total > p.usable_blocks
    elif p.policy == SchedPolicy.LIGHTLLM:
        # alone on the replica it still needs its whole sequence (less the last token) free,
        # and its prompt must fit one prefill batch
        alone = prompt + 1 + np.maximum(decode - 2, 0)
        too_big = alone >= p.usable_blocks
        out[(out == 0) & (prompt > p.max_tokens_in_batch)] = REJECT_MAX_LEN
    else:
        too_big = np.zeros_like(out, dtype=bool)
    out[(out == 0) & too_big] = REJECT_KV_CAPACITY
    if p.policy == SchedPolicy.VLLM:
        # NOTE(vllm): v0 ignores prompts over max_num_batched_tokens; they would wait forever
        out[(out == 0) & (prompt > p.max_tokens_in_batch)] = REJECT_BATCH_TOKENS
    return out


# stable names of the reasons (summary.json's rejected_by_reason)
REJECT_NAMES = {
    REJECT_KV_CAPACITY: "kv_capacity",
    REJECT_MAX_LEN: "max_len",
    REJECT_BATCH_TOKENS: "batch_tokens",
}


def rejection_report(rejected: np.ndarray, setup: EngineSetup, cfg) -> dict:
    """Per reason: how many requests were rejected up front, the bound they broke and what
    would let them run."""
    p = setup.params
    counts = np.bincount(rejected, minlength=len(REJECT_REASONS) + 1)
    max_len_flag = (
        "--scheduler.max-model-len or a longer-context model"
        if p.policy == SchedPolicy.VLLM_V1
        else "--scheduler.max-tokens"
    )
    bounds = {
        REJECT_KV_CAPACITY: (
            f"a request's blocks > {p.usable_blocks} KV blocks of {p.block_size} tokens per "
            "replica",
            "more memory per replica (cluster.tp, a larger device) or --scheduler.num-blocks",
        ),
        REJECT_MAX_LEN: (
            f"prompt + output > {setup.max_seq_len} tokens (the per-request bound of "
            f"{cfg.cluster.model})",
            max_len_flag,
        ),
        REJECT_BATCH_TOKENS: (
            f"prompt > scheduler.max_tokens_in_batch {p.max_tokens_in_batch}",
            "--scheduler.max-tokens-in-batch",
        ),
    }
    out = {}
    for code, name in REJECT_NAMES.items():
        if counts[code]:
            bound, fix = bounds[code]
            out[name] = {"count": int(counts[code]), "bound": bound, "fix": fix}
    return out


def check_strict(
    rejected: np.ndarray, prompt: np.ndarray, decode: np.ndarray, source_row: np.ndarray
) -> None:
    """Strict mode: raise ConfigError naming how many requests can never run and the first."""
    bad = np.flatnonzero(rejected)
    if bad.size == 0:
        return
    i = int(bad[0])
    raise ConfigError(
        f"strict: {bad.size} request(s) can never run; first: request row {int(source_row[i]) + 1}"
        f" ({int(prompt[i])} prompt + {int(decode[i])} output tokens) "
        f"{REJECT_REASONS[int(rejected[i])]}"
    )
