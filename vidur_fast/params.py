"""Config -> kernel parameters (SchedParams, KV capacity, up-front request rejections)."""

from dataclasses import dataclass

import numpy as np

from vidur_fast.catalog import DeviceSpec, ModelSpec
from vidur_fast.config import (
    FasterTransformerScheduler,
    LeastOutstandingPrefillRouter,
    LeastOutstandingRequestsRouter,
    OrcaScheduler,
    PrefixAwareRouter,
    RandomRouter,
    RoundRobinRouter,
    SarathiScheduler,
    SimConfig,
    StickyRouter,
    VllmV0Scheduler,
    VllmV1Scheduler,
)
from vidur_fast.engine.memory import MemoryPlan, plan_request_slots, plan_tokens
from vidur_fast.errors import ConfigError
from vidur_fast.kernels.dtypes import RouterPolicy, SchedPolicy
from vidur_fast.kernels.state import SchedParams

# reasons in Reqs.rejected
REJECT_NONE = 0
REJECT_KV_CAPACITY = 1  # needs more KV blocks than the replica has
REJECT_MAX_LEN = 2  # longer than the scheduler's per-request token bound
REJECT_REASONS = {
    REJECT_KV_CAPACITY: "needs more KV blocks than a replica has",
    REJECT_MAX_LEN: "longer than the per-request token bound (max_model_len / max_tokens)",
}


@dataclass(frozen=True)
class EngineSetup:
    params: SchedParams
    plan: MemoryPlan
    block_size: int
    max_seq_len: int  # per-request bound on prompt + output (0 = none)


def _positive(path: str, value, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise ConfigError(f"{path}: must be > 0 (got {value})")


def router_code(cfg: SimConfig) -> int:
    match cfg.router:
        case RoundRobinRouter():
            return RouterPolicy.ROUND_ROBIN
        case RandomRouter():
            return RouterPolicy.RANDOM
        case LeastOutstandingRequestsRouter():
            return RouterPolicy.LOR
        case LeastOutstandingPrefillRouter():
            return RouterPolicy.LOP
        case StickyRouter():
            return RouterPolicy.STICKY
        case PrefixAwareRouter():
            return RouterPolicy.PREFIX_AWARE
    raise ConfigError(f"router: unknown router {cfg.router!r}")


def _router_imbalance(cfg: SimConfig) -> int:
    if isinstance(cfg.router, PrefixAwareRouter):
        if cfg.router.max_imbalance_tokens < 0:
            raise ConfigError(
                "router.max_imbalance_tokens: must be >= 0 "
                f"(got {cfg.router.max_imbalance_tokens})"
            )
        return cfg.router.max_imbalance_tokens
    return 0


def _check_prefix_router(cfg: SimConfig) -> None:
    s = cfg.scheduler
    if isinstance(cfg.router, PrefixAwareRouter) and not (
        isinstance(s, VllmV1Scheduler) and s.enable_prefix_caching
    ):
        raise ConfigError(
            "router: prefix_aware needs the vllm_v1 scheduler with enable_prefix_caching=True"
        )


def build_setup(cfg: SimConfig, model: ModelSpec, device: DeviceSpec) -> EngineSetup:
    """Validate the scheduler/cluster fields and derive kernel parameters."""
    c = cfg.cluster
    _positive("cluster.num_replicas", c.num_replicas)
    if not 0.0 <= c.memory_margin_fraction < 1.0:
        raise ConfigError(
            f"cluster.memory_margin_fraction: must be in [0, 1) (got {c.memory_margin_fraction})"
        )
    model.check_parallelism(c.tp, c.pp)
    _check_prefix_router(cfg)
    s = cfg.scheduler
    _positive("scheduler.block_size", s.block_size)
    _positive("scheduler.num_blocks", s.num_blocks, allow_none=True)
    common = dict(router=int(router_code(cfg)), n_replicas=c.num_replicas, pp=c.pp)
    margin = c.memory_margin_fraction
    match s:
        case VllmV1Scheduler():
            if c.pp != 1:
                raise ConfigError("cluster.pp: the vllm_v1 scheduler supports pp = 1 only")
            _positive("scheduler.max_num_batched_tokens", s.max_num_batched_tokens)
            _positive("scheduler.max_num_seqs", s.max_num_seqs)
            if s.long_prefill_token_threshold < 0:
                raise ConfigError(
                    "scheduler.long_prefill_token_threshold: must be >= 0 "
                    f"(got {s.long_prefill_token_threshold})"
                )
            _positive("scheduler.max_model_len", s.max_model_len, allow_none=True)
            plan = plan_tokens(model, device, c.tp, c.pp, s.block_size, margin)
            blocks = s.num_blocks if s.num_blocks is not None else plan.num_blocks
            if blocks < 2:
                raise ConfigError(f"scheduler.num_blocks: must be >= 2 (got {blocks})")
            max_len = s.max_model_len or model.max_position_embeddings
            p = SchedParams(
                policy=int(SchedPolicy.VLLM_V1),
                block_size=s.block_size,
                # NOTE(vllm): block 0 is the reserved null block
                num_blocks=blocks - 1,
                watermark_blocks=0,
                batch_cap=s.max_num_seqs,
                max_micro_batch=s.max_num_seqs,
                chunk_size=s.max_num_batched_tokens,
                max_tokens_in_batch=0,
                max_blocks_per_seq=0,
                max_batch_size=s.max_num_seqs,
                max_waiting_iters=0,
                long_prefill_threshold=s.long_prefill_token_threshold,
                max_model_len=max_len,
                reserve_full_seq=int(s.reserve_full_sequence),
                fix_ft_leak=1,
                prefix_caching=int(s.enable_prefix_caching),
                router_imbalance=_router_imbalance(cfg),
                **common,
            )
            return EngineSetup(p, plan, s.block_size, max_len)
        case (
            SarathiScheduler() | VllmV0Scheduler() | OrcaScheduler() | FasterTransformerScheduler()
        ):
            _positive("scheduler.batch_size_cap", s.batch_size_cap)
            _positive("scheduler.max_tokens", s.max_tokens)
            if s.batch_size_cap < c.pp:
                raise ConfigError(
                    f"scheduler.batch_size_cap: must be >= pp ({c.pp}) (got {s.batch_size_cap})"
                )
            plan = plan_request_slots(model, device, c.tp, c.pp, s.block_size, s.max_tokens, margin)
            blocks = s.num_blocks if s.num_blocks is not None else plan.num_blocks
            wm_frac = getattr(s, "watermark_blocks_fraction", 0.0)
            if not 0.0 <= wm_frac < 1.0:
                raise ConfigError(
                    f"scheduler.watermark_blocks_fraction: must be in [0, 1) (got {wm_frac})"
                )
            chunk = getattr(s, "chunk_size", 0)
            if isinstance(s, SarathiScheduler):
                _positive("scheduler.chunk_size", chunk)
            max_in_batch = getattr(s, "max_tokens_in_batch", 0)
            if isinstance(s, VllmV0Scheduler):
                _positive("scheduler.max_tokens_in_batch", max_in_batch)
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
                num_blocks=blocks,
                watermark_blocks=int(wm_frac * blocks),
                batch_cap=s.batch_size_cap,
                max_micro_batch=s.batch_size_cap // c.pp,
                chunk_size=chunk,
                max_tokens_in_batch=max_in_batch,
                max_blocks_per_seq=max_blocks_per_seq,
                max_batch_size=max(1, min(plan.max_batch_size, s.batch_size_cap)),
                max_waiting_iters=0,
                long_prefill_threshold=0,
                max_model_len=0,
                reserve_full_seq=0,
                fix_ft_leak=1,
                **common,
            )
            bound = (
                s.max_tokens if policy in (SchedPolicy.ORCA, SchedPolicy.FASTER_TRANSFORMER) else 0
            )
            return EngineSetup(p, plan, s.block_size, bound)
    raise ConfigError(f"scheduler: unknown scheduler {s!r}")


def rejection_codes(prompt: np.ndarray, decode: np.ndarray, setup: EngineSetup) -> np.ndarray:
    """Requests that could never run on a replica (rejected up front instead of hanging)."""
    p = setup.params
    bs = setup.block_size
    total = prompt + decode
    out = np.zeros(prompt.shape[0], dtype=np.uint8)
    if setup.max_seq_len > 0:
        out[total > setup.max_seq_len] = REJECT_MAX_LEN
    blocks_total = -(-total // bs)
    blocks_prompt = -(-prompt // bs)
    if p.policy in (SchedPolicy.SARATHI, SchedPolicy.VLLM):
        too_big = (blocks_prompt > p.num_blocks - p.watermark_blocks) | (
            blocks_total > p.num_blocks
        )
    elif p.policy == SchedPolicy.VLLM_V1:
        too_big = blocks_total > p.num_blocks
    else:
        too_big = np.zeros_like(out, dtype=bool)
    out[(out == 0) & too_big] = REJECT_KV_CAPACITY
    return out
