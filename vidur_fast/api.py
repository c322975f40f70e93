"""Python API: simulate(config) -> Result. No global state; same config -> same result."""

import importlib
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, replace

import numpy as np

from vidur_fast.catalog import default_node_for, get_device, get_model, get_node
from vidur_fast.config.convert import field_types, member_name, union_members
from vidur_fast.config.engine import resolve_engine
from vidur_fast.config.sim import (
    SESSION_ROUTER_TYPES,
    OutputConfig,
    PrefixAwareRouter,
    SimConfig,
    VllmV1Scheduler,
    cluster_pools,
    pool_predictor,
    pool_view,
)
from vidur_fast.config.validate import has_route_groups, is_pd, pool_errors, validate_config
from vidur_fast.config.workload import ClosedLoopWorkload
from vidur_fast.engine.run import run_engine
from vidur_fast.engine.state import without_pool
from vidur_fast.errors import ConfigError
from vidur_fast.kernels.codes import (
    CLAMP_DECODE_BATCH,
    CLAMP_DECODE_KV,
    CLAMP_PREFILL_CHUNK,
    CLAMP_PREFILL_KV,
    CLAMP_TOKENS,
)
from vidur_fast.kernels.dtypes import NO_ID, NS_PER_S
from vidur_fast.kernels.pd import (
    CONTENTION_FAIR_SHARE,
    CONTENTION_NONE,
    DECIDE_ALWAYS,
    DECIDE_NEVER,
    DECIDE_UNCACHED_ABOVE,
    ROLE_DECODE,
    ROLE_MIXED,
    ROLE_PREFILL,
    make_pd,
)
from vidur_fast.kernels.pools import stack_pools
from vidur_fast.kernels.router import route_groups
from vidur_fast.metrics.closed_loop import (
    closed_loop_arrivals,
    closed_loop_metrics,
    closed_loop_summary,
)
from vidur_fast.metrics.pools import (
    pd_link_summary,
    pd_request_columns,
    pd_summary,
    pool_summary,
)
from vidur_fast.metrics.requests import request_metrics
from vidur_fast.metrics.result import Result, replica_table
from vidur_fast.metrics.summary import build_summary
from vidur_fast.params.memory import kv_bytes_per_token
from vidur_fast.params.setup import (
    build_setup,
    check_strict,
    lockstep_group,
    rejection_codes,
    rejection_report,
    router_knobs,
)
from vidur_fast.timing.build import build_timing
from vidur_fast.workload.build import build_workload
from vidur_fast.workload.closed_loop import build_closed_loop
from vidur_fast.workload.frontend import engine_arrivals, service_s


def _writer_imports(out: OutputConfig):
    """When the config names a run directory (it is about to be written): a function that
    imports what the writers of metrics.h5 and request_metrics.csv import when they start
    (h5py, Arrow: 0.1-0.15 CPU-s), for the engine to run while its loop runs; else None."""
    if out.dir is None:
        return None
    names = (["h5py"] if out.write_metrics_h5 else []) + (
        ["pyarrow", "pyarrow.csv"] if out.write_request_csv else []
    )
    if not names:
        return None

    def load() -> None:
        for name in names:
            importlib.import_module(name)

    return load


def _routers(cfg: SimConfig) -> list[tuple[str, object]]:
    """(field path, router) of the cluster's router and of each pool's own."""
    own = [(f"cluster.pools[{k}].router", p.router) for k, p in enumerate(cfg.cluster.pools)]
    return [("router", cfg.router)] + [x for x in own if x[1] is not None]


def _needs_hashes(cfg: SimConfig) -> bool:
    """Block hashes are read only when prefix caching or a router uses them."""
    s = cfg.scheduler
    caching = isinstance(s, VllmV1Scheduler) and s.enable_prefix_caching
    return caching or any(isinstance(r, PrefixAwareRouter) for _, r in _routers(cfg))


def _check_workload_for_router(cfg: SimConfig, wl) -> None:
    """A router whose input the workload lacks is refused (it would silently act as another)."""
    for path, router in _routers(cfg):
        if isinstance(router, SESSION_ROUTER_TYPES) and not wl.has_sessions:
            name = member_name(union_members(field_types(SimConfig)["router"]), router)
            raise ConfigError(
                f"{path}: {name} needs session ids in the workload (a trace with a session_id "
                "column); this workload has none"
            )
        if isinstance(router, PrefixAwareRouter) and not wl.has_hashes:
            raise ConfigError(
                f"{path}: prefix_aware needs prefix block hashes in the workload (a trace with "
                "block_hash_ids and block_size, or Mooncake hash_ids); this workload has none"
            )


def run_header(cfg: SimConfig, model, device, wl) -> dict:
    """What ran, as the summary's first lines say it (with pools: the pools' devices, joined,
    and their layouts; for a MoE model also the attention-DP ranks of an engine and the
    expert-parallel ranks, per pool)."""
    c = cfg.cluster
    pools = cluster_pools(c)
    out = {
        "model": model.name,
        "device": device.name
        if not c.pools
        else " + ".join(f"{p.num_replicas} x {p.device}" for p in pools),
        "tp": c.tp if not c.pools else "/".join(str(p.tp) for p in pools),
        "pp": c.pp if not c.pools else "/".join(str(p.pp) for p in pools),
        "replicas": sum(p.num_replicas for p in pools),
        "scheduler": member_name(union_members(field_types(SimConfig)["scheduler"]), cfg.scheduler),
        "router": member_name(union_members(field_types(SimConfig)["router"]), cfg.router),
        "workload": wl.source,
        "requests": len(wl),
    }
    if model.moe is not None:
        views = [pool_predictor(cfg.predictor, p) for p in c.pools] or [cfg.predictor]
        out["attention_dp"] = "/".join(str(v.attention_dp) for v in views)
        out["moe_ep"] = "/".join(str(v.moe_ep) for v in views)
    return out


def batch_fill(req, busy_ns, scheduler) -> dict:
    """How full the replicas ran, the saturation figures beside busy_fraction_mean (which
    counts any running step, however small): the mean running batch (requests per batch,
    weighted by the batch's time on the GPU: the requests' summed execution time over the
    replicas' busy time) and that mean against the scheduler's sequence cap."""
    busy_s = float(np.sum(busy_ns)) / NS_PER_S
    ran = np.nansum(np.asarray(req["request_execution_time"]))
    mean = float(ran / busy_s) if busy_s > 0 else 0.0
    cap = getattr(scheduler, "max_num_seqs", None) or getattr(scheduler, "batch_size_cap", None)
    return {
        "running_batch_mean": mean,
        "batch_size_cap": cap,
        "batch_fill_mean": mean / cap if cap else None,
    }


@dataclass(frozen=True)
class _Pool:
    """One pool of a run: its single-pool config view and what it derives."""

    cfg: SimConfig
    device: object
    node: object
    setup: object


def _pools(cfg: SimConfig, model) -> list[_Pool]:
    """Each pool's device, node and kernel parameters (one entry for a one-pool cluster)."""
    out = []
    for k, pool in enumerate(cluster_pools(cfg.cluster)):
        view = cfg if not cfg.cluster.pools else pool_view(cfg, pool)
        with pool_errors(cfg.cluster, k):
            device = get_device(view.cluster.device)
            node = get_node(view.cluster.node or default_node_for(device.name))
            setup = build_setup(view, model, device)
        dp_group = lockstep_group(view, model)
        setup = replace(setup, params=setup.params._replace(dp_group=dp_group))
        out.append(_Pool(view, device, node, setup))
    return out


def _timing(pool: _Pool, model, progress, timing_cache):
    c = pool.cfg.cluster
    block_size = pool.setup.profile_block_size
    timing_key = (model, pool.device, pool.node, c.tp, c.pp, pool.cfg.predictor)
    timing_key += (block_size,)
    timing = timing_cache.get(timing_key) if timing_cache is not None else None
    if timing is None:
        timing = build_timing(
            model,
            pool.device,
            pool.node,
            c.tp,
            c.pp,
            pool.cfg.predictor,
            block_size=block_size,
            progress=progress,
        )
        if timing_cache is not None:
            timing_cache[timing_key] = timing
    return timing


def _pool_params(pools: list[_Pool], timings: list) -> tuple:
    """With cluster.pools: the SchedParams that size the state (all replicas, the largest pp
    and block count) and the kernels' PoolParams."""
    grids = [t.grids for t in timings]
    for k, g in enumerate(grids[1:], 1):
        for name in ("tok_ms", "kv_save_ms", "allreduce_ms", "sendrecv_ms", "decode_ms"):
            if getattr(g, name).shape != getattr(grids[0], name).shape:
                raise ConfigError(
                    f"cluster.pools[{k}]: its timing grids ({name} {getattr(g, name).shape}) "
                    f"differ in shape from pool 0's ({getattr(grids[0], name).shape})"
                )
        if g.prefill_ms.shape != grids[0].prefill_ms.shape:
            raise ConfigError(
                f"cluster.pools[{k}]: its prefill grid {g.prefill_ms.shape} differs in shape "
                f"from pool 0's {grids[0].prefill_ms.shape}"
            )
    sched = [p.setup.params for p in pools]
    rep_pool = np.repeat(np.arange(len(pools)), [p.cfg.cluster.num_replicas for p in pools])
    sp = sched[0]._replace(
        num_replicas=int(rep_pool.size),
        pp=max(s.pp for s in sched),
        usable_blocks=max(s.usable_blocks for s in sched),
        max_num_seqs=max(s.max_num_seqs for s in sched),  # sizes the running lists
        dp_group=max(s.dp_group for s in sched),  # > 1: some pool's ranks step in lockstep
    )
    return sp, stack_pools(rep_pool, sched, [t.params for t in timings], grids)


_ROLE_CODES = {"mixed": ROLE_MIXED, "prefill": ROLE_PREFILL, "decode": ROLE_DECODE}
_DECIDERS = {
    "always": DECIDE_ALWAYS,
    "never": DECIDE_NEVER,
    "uncached_tokens_above": DECIDE_UNCACHED_ABOVE,
}


def _route_groups(cfg: SimConfig, role: list, n: int):
    """The kernels' routers over the pools' replicas (kernels/router.py route_groups)."""
    pools = cfg.cluster.pools
    rep_pool = np.repeat(np.arange(len(pools)), [p.num_replicas for p in pools])
    own = [
        None if p.router is None else router_knobs(p.router, f"cluster.pools[{k}].router")
        for k, p in enumerate(pools)
    ]
    return route_groups(role, rep_pool, router_knobs(cfg.router, "router"), own, n, cfg.seed)


def _front_ends(cfg: SimConfig) -> int:
    """API servers in front of the engines: one per replica that takes arrivals (mixed and
    prefill replicas; a decode replica gets its requests from a prefill replica)."""
    c = cfg.cluster
    if not c.pools:
        return c.num_replicas
    return sum(p.num_replicas for p in c.pools if p.role != "decode")


def _pd_setup(cfg: SimConfig, pools: list[_Pool], model):
    """With prefill/decode pools: the KV transfer link and a builder of the kernels' PDState
    (of the request count); None otherwise. The link is cluster.kv_transfer, else the first
    prefill pool's node (its inter-node bandwidth and point-to-point latency). Mixed pools
    with routers of their own and no prefill/decode pools: no link, and a PDState whose
    replicas are all mixed and whose decider is never (it carries the routers only)."""
    if not has_route_groups(cfg.cluster):
        return None, None
    if not is_pd(cfg.cluster):
        role = [ROLE_MIXED] * sum(p.num_replicas for p in cfg.cluster.pools)
        return None, lambda n: make_pd(
            role,
            [0.0] * len(role),
            1.0,
            0.0,
            n,
            DECIDE_NEVER,
            routers=_route_groups(cfg, role, n),
        )
    roles = [p.role for p in cfg.cluster.pools]
    k = roles.index("prefill")
    node = pools[k].node
    x = cfg.cluster.kv_transfer
    bw = x.bandwidth_gbps if x.bandwidth_gbps is not None else node.inter_node_bandwidth_gbps
    lat = x.latency_us if x.latency_us is not None else node.p2p_latency_us
    nv_bw = x.intra_node_bandwidth_gbps
    nv_bw = nv_bw if nv_bw is not None else node.nvlink_bandwidth_gbps
    nv_lat = x.intra_node_latency_us
    nv_lat = nv_lat if nv_lat is not None else node.p2p_latency_us
    for name, v, figure in (
        ("bandwidth_gbps", bw, "inter_node_bandwidth_gbps"),
        ("intra_node_bandwidth_gbps", nv_bw, "nvlink_bandwidth_gbps"),
    ):
        if not v > 0:
            raise ConfigError(
                f"cluster.kv_transfer.{name}: must be > 0 (node {node.name} gives {figure} {v})"
            )
    rep_node, num_nodes = place_replicas(pools, x.placement)
    role, tok_bytes = [], []
    for p, pool in zip(pools, cfg.cluster.pools, strict=True):
        c = p.cfg.cluster
        # the whole model's K and V of one token as the pool lays it out (every TP rank and
        # pipeline stage sends its share)
        per_gpu = kv_bytes_per_token(
            model, c.tp, model.num_layers // c.pp, cfg.predictor.kv_cache_dtype
        )
        role += [_ROLE_CODES[pool.role]] * c.num_replicas
        tok_bytes += [float(per_gpu * c.tp * c.pp)] * c.num_replicas
    link = {
        "bandwidth_gbps": float(bw),
        "latency_us": float(lat),
        "intra_node_bandwidth_gbps": float(nv_bw),
        "intra_node_latency_us": float(nv_lat),
        "placement": x.placement,
        "num_nodes": num_nodes,
    }
    share = CONTENTION_FAIR_SHARE if x.contention == "fair_share" else CONTENTION_NONE
    if share == CONTENTION_FAIR_SHARE:
        link["contention"] = x.contention
    decide = _DECIDERS[cfg.cluster.pd_decider]
    above = int(cfg.cluster.pd_uncached_tokens_above)
    return link, lambda n: make_pd(
        role,
        tok_bytes,
        float(bw),
        float(lat),
        n,
        decide,
        above,
        share,
        routers=_route_groups(cfg, role, n),
        node=rep_node,
        intra_bandwidth_gbps=float(nv_bw),
        intra_latency_us=float(nv_lat),
    )


def place_replicas(pools: list[_Pool], placement: str = "packed") -> tuple[list[int], int]:
    """Each replica's node index (its first node) and the node count. packed: pools in order,
    replicas in order, each replica's tp x pp GPUs on the current node when they fit in its
    free GPUs, else on a new node; a replica larger than a node takes whole nodes of its own;
    a pool of another node type than the current node's starts a new node. separate_nodes:
    every replica on nodes of its own."""
    out: list[int] = []
    nodes = 0
    free, kind = 0, None  # the current node's free GPUs and its node type
    for p in pools:
        c = p.cfg.cluster
        g, per = c.tp * c.pp, p.node.gpus_per_node
        for _ in range(c.num_replicas):
            if placement == "packed" and g <= per and kind == p.node.name and g <= free:
                out.append(nodes - 1)
                free -= g
                continue
            out.append(nodes)
            whole = -(-g // per)
            nodes += whole
            free, kind = (per - g, p.node.name) if whole == 1 else (0, None)
    return out, nodes


def _pool_summaries(cfg, pools, req, replicas, sim_time_s, queued=None) -> list[dict]:
    rows = []
    roles = [p.role for p in cfg.cluster.pools] or ["mixed"]
    for p, role in zip(pools, roles, strict=True):
        c = p.cfg.cluster
        rows.append(
            {
                "device": p.device.name,
                "node": p.node.name,
                "tp": c.tp,
                "pp": c.pp,
                "role": role,
                "replicas": c.num_replicas,
                "price_per_gpu_hour_usd": p.device.price_per_hour_usd,
            }
        )
    return pool_summary(req, replicas, rows, sim_time_s, queued)


def simulate(
    cfg: SimConfig, *, progress: bool = False, timing_cache: MutableMapping | None = None
) -> Result:
    """Run one simulation in memory (no files written; see outputs.write_run).

    timing_cache: optional memo of built timing models, so that a process running many
    simulations loads each (model, device, node, tp, pp, predictor) grid set once.
    A cluster of several pools (cluster.pools, docs/pools.md) runs every replica of every
    pool in one engine, each with its pool's KV blocks and timing grids.
    """
    phases = {}
    t = time.perf_counter()
    # engine defaults (None / "auto") resolved once: the Result and config.json carry them
    cfg = resolve_engine(cfg)
    validate_config(cfg)
    model = get_model(cfg.cluster.model)
    pools = _pools(cfg, model)
    device, setup = pools[0].device, pools[0].setup
    closed_plan = None
    need_hashes = False
    if isinstance(cfg.workload, ClosedLoopWorkload):
        wl, closed_plan = build_closed_loop(
            cfg.workload, cfg.seed, block_size=setup.profile_block_size
        )
        closed_plan = replace(closed_plan, front_ends=_front_ends(cfg))
        need_hashes = _needs_hashes(cfg) and wl.has_hashes  # a prompt pool (prefix reuse)
    else:
        need_hashes = _needs_hashes(cfg)
        wl = build_workload(
            cfg.workload, cfg.seed, block_size=setup.profile_block_size, need_hashes=need_hashes
        )
    _check_workload_for_router(cfg, wl)
    if cfg.cluster.pools:
        # a request is rejected up front unless it fits a replica of every pool (the routers
        # do not look at KV capacity): the pool with the fewest blocks decides
        setup = min(pools, key=lambda p: p.setup.params.usable_blocks).setup
    rejected = rejection_codes(wl.prompt_tokens, wl.decode_tokens, setup)
    if cfg.strict:
        check_strict(rejected, wl.prompt_tokens, wl.decode_tokens, wl.source_row)
    phases["workload_s"] = time.perf_counter() - t
    t = time.perf_counter()
    timings = []
    for k, pool in enumerate(pools):
        with pool_errors(cfg.cluster, k):
            timings.append(_timing(pool, model, progress, timing_cache))
    timing = timings[0]
    sp, pool_params = setup.params, None
    if cfg.cluster.pools:
        sp, pool_params = _pool_params(pools, timings)
    pd_link, pd_setup = _pd_setup(cfg, pools, model)
    phases["timing_s"] = time.perf_counter() - t
    # one Generator per purpose, seeded from the config seed
    u_route = np.random.default_rng([cfg.seed, 1]).random(len(wl))
    grids = timing.grids._replace(counters=np.zeros_like(timing.grids.counters))
    engine_arrival_s = wl.arrival_s
    response_s = 0.0
    if closed_plan is None:  # the closed loop runs its front end inside the engine
        w = cfg.workload
        service = service_s(w.ingest_ms, w.ingest_us_per_token, wl.prompt_tokens)
        engine_arrival_s = engine_arrivals(wl.arrival_s, service, _front_ends(cfg))
        response_s = 1e-3 * (w.response_ms or 0.0)
    out = run_engine(
        engine_arrival_s,
        wl.prompt_tokens,
        wl.decode_tokens,
        wl.session_id,
        wl.hash_offsets,
        rejected,
        grids,
        timing.params,
        sp,
        u_route,
        cfg.time_limit_s,
        progress,
        closed_loop=closed_plan,
        hashes=wl.hashes if need_hashes and wl.has_hashes else None,
        compress_batches=cfg.output.dir is not None and cfg.output.write_metrics_h5,
        pools=pool_params,
        pd_setup=pd_setup,
        alongside=_writer_imports(cfg.output),
    )
    phases["jit_s"] = out.jit_s
    phases["loop_s"] = out.loop_s
    phases["loop_cpu_s"] = out.loop_cpu_s
    t = time.perf_counter()
    out.kv = without_pool(out.kv)
    if not is_pd(cfg.cluster):  # a PDState that carried per-pool routers only
        out.disagg = None
    if out.disagg is not None:  # requests never handed off still run with one output token
        held = out.disagg.src != NO_ID
        out.reqs.orig_decode[held] = out.disagg.real_decode[held]
    arrival_s = wl.arrival_s if closed_plan is None else closed_loop_arrivals(out.reqs)
    req = request_metrics(out.reqs, arrival_s, response_s)
    if out.disagg is not None:
        req = pd_request_columns(req, out.disagg)
    if closed_plan is not None:
        req = closed_loop_metrics(req, closed_plan, out.closed_loop)
    replicas = replica_table(out, sp, out.end_ns, pool_params)
    if pd_link is not None:  # the replica's node index (place_replicas)
        replicas = replicas.assign(node=np.asarray(out.disagg.node, dtype=np.int64))
    c = grids.counters
    clamped = {
        "tokens": int(c[CLAMP_TOKENS]),
        "decode_batch": int(c[CLAMP_DECODE_BATCH]),
        "decode_kv": int(c[CLAMP_DECODE_KV]),
        "prefill_kv": int(c[CLAMP_PREFILL_KV]),
        "prefill_chunk": int(c[CLAMP_PREFILL_CHUNK]),
    }
    in_window = req if closed_plan is None else req[req["in_window"]]
    sim_time_s = out.end_ns / NS_PER_S
    summary = build_summary(
        in_window,
        replicas,
        out.hist,
        sim_time_s,
        cfg.cluster.tp * cfg.cluster.pp,
        device.price_per_hour_usd,
        clamped,
        out.status,
    )
    # disaggregated: a request queues on its prefill replica and completes on its decode one
    queued = None
    if out.disagg is not None:
        ids = np.asarray(in_window.index)
        src = out.disagg.src[ids]
        queued = np.where(src != NO_ID, src, out.reqs.replica[ids])
    summary["pools"] = _pool_summaries(cfg, pools, in_window, replicas, sim_time_s, queued)
    if cfg.cluster.pools:  # GPUs and cost summed over the pools, each at its device's price
        summary["gpus"] = sum(p["gpus"] for p in summary["pools"])
        summary["cost_usd"] = sum(p["cost_usd"] for p in summary["pools"])
        n_done = summary["num_completed"]
        summary["cost_per_1k_requests_usd"] = (
            1000.0 * summary["cost_usd"] / n_done if n_done else None
        )
    if out.disagg is not None:
        ids = np.asarray(in_window.index)
        summary["pd"] = pd_summary(out.disagg, out.reqs, pd_link, ids)
        summary["pd"]["links"] = pd_link_summary(out.disagg, out.reqs, ids, pd_link, sim_time_s)
    summary["num_blocks_per_replica"] = int(setup.params.usable_blocks)
    summary.update(batch_fill(req, out.reps.busy_ns, cfg.scheduler))
    summary["rejected_by_reason"] = rejection_report(rejected, setup, cfg)
    summary["run"] = run_header(cfg, model, device, wl)
    if closed_plan is not None:
        summary["closed_loop"] = closed_loop_summary(req, closed_plan)
    summary["timing_source"] = timing.meta.get("source")
    summary["timing_cache_key"] = timing.meta.get("key")
    prov = timing.meta.get("provenance") or {}
    for key in ("moe", "sliding_window"):  # MoE / sliding-window models only
        if key in prov:  # which measured shape, table and rule timed these layers
            summary[f"timing_{key}"] = prov[key]
    phases["metrics_s"] = time.perf_counter() - t
    return Result(cfg, summary, req, out.batch_log, replicas, out.hist, timing.meta, phases)
