"""Python API: simulate(config) -> Result. No global state; same config -> same result."""

import time
from collections.abc import MutableMapping

import numpy as np

from vidur_fast.catalog import default_node_for, get_device, get_model, get_node
from vidur_fast.config.convert import field_types, member_name, union_members
from vidur_fast.config.engine import resolve_engine
from vidur_fast.config.sim import (
    SESSION_ROUTER_TYPES,
    PrefixAwareRouter,
    SimConfig,
    VllmV1Scheduler,
)
from vidur_fast.config.validate import validate_config
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
from vidur_fast.kernels.dtypes import NS_PER_S
from vidur_fast.metrics.closed_loop import (
    closed_loop_arrivals,
    closed_loop_metrics,
    closed_loop_summary,
)
from vidur_fast.metrics.requests import request_metrics
from vidur_fast.metrics.result import Result, replica_table
from vidur_fast.metrics.summary import build_summary
from vidur_fast.params.setup import build_setup, check_strict, rejection_codes, rejection_report
from vidur_fast.timing.build import build_timing
from vidur_fast.workload.build import build_workload
from vidur_fast.workload.closed_loop import build_closed_loop
from vidur_fast.workload.frontend import engine_arrivals, service_s


def _needs_hashes(cfg: SimConfig) -> bool:
    """Block hashes are read only when prefix caching or the router uses them."""
    s = cfg.scheduler
    caching = isinstance(s, VllmV1Scheduler) and s.enable_prefix_caching
    return caching or isinstance(cfg.router, PrefixAwareRouter)


def _check_workload_for_router(cfg: SimConfig, wl) -> None:
    """A router whose input the workload lacks is refused (it would silently act as another)."""
    if isinstance(cfg.router, SESSION_ROUTER_TYPES) and not wl.has_sessions:
        name = member_name(union_members(field_types(SimConfig)["router"]), cfg.router)
        raise ConfigError(
            f"router: {name} needs session ids in the workload (a trace with a session_id "
            "column); this workload has none"
        )
    if isinstance(cfg.router, PrefixAwareRouter) and not wl.has_hashes:
        raise ConfigError(
            "router: prefix_aware needs prefix block hashes in the workload (a trace with "
            "block_hash_ids and block_size, or Mooncake hash_ids); this workload has none"
        )


def run_header(cfg: SimConfig, model, device, wl) -> dict:
    """What ran, as the summary's first lines say it."""
    c = cfg.cluster
    return {
        "model": model.name,
        "device": device.name,
        "tp": c.tp,
        "pp": c.pp,
        "replicas": c.num_replicas,
        "scheduler": member_name(union_members(field_types(SimConfig)["scheduler"]), cfg.scheduler),
        "router": member_name(union_members(field_types(SimConfig)["router"]), cfg.router),
        "workload": wl.source,
        "requests": len(wl),
    }


def batch_fill(req, busy_ns, scheduler) -> dict:
    """How full the replicas ran, the saturation figures beside busy_fraction_mean (which
    counts any running step, however small): the mean running batch (requests per batch,
    weighted by the batch's time on the GPU: the requests' summed execution time over the
    replicas' busy time) and that mean against the scheduler's sequence cap."""
    busy_s = float(np.sum(busy_ns)) / NS_PER_S
    ran = np.nansum(req["request_execution_time"].to_numpy())
    mean = float(ran / busy_s) if busy_s > 0 else 0.0
    cap = getattr(scheduler, "max_num_seqs", None) or getattr(scheduler, "batch_size_cap", None)
    return {
        "running_batch_mean": mean,
        "batch_size_cap": cap,
        "batch_fill_mean": mean / cap if cap else None,
    }


def simulate(
    cfg: SimConfig, *, progress: bool = False, timing_cache: MutableMapping | None = None
) -> Result:
    """Run one simulation in memory (no files written; see outputs.write_run).

    timing_cache: optional memo of built timing models, so that a process running many
    simulations loads each (model, device, node, tp, pp, predictor) grid set once.
    """
    phases = {}
    t = time.perf_counter()
    # engine defaults (None / "auto") resolved once: the Result and config.json carry them
    cfg = resolve_engine(cfg)
    validate_config(cfg)
    model = get_model(cfg.cluster.model)
    device = get_device(cfg.cluster.device)
    node = get_node(cfg.cluster.node or default_node_for(device.name))
    setup = build_setup(cfg, model, device)
    closed_plan = None
    need_hashes = False
    if isinstance(cfg.workload, ClosedLoopWorkload):
        wl, closed_plan = build_closed_loop(
            cfg.workload, cfg.seed, block_size=setup.profile_block_size
        )
        need_hashes = _needs_hashes(cfg) and wl.has_hashes  # a prompt pool (prefix reuse)
    else:
        need_hashes = _needs_hashes(cfg)
        wl = build_workload(
            cfg.workload, cfg.seed, block_size=setup.profile_block_size, need_hashes=need_hashes
        )
    _check_workload_for_router(cfg, wl)
    rejected = rejection_codes(wl.prompt_tokens, wl.decode_tokens, setup)
    if cfg.strict:
        check_strict(rejected, wl.prompt_tokens, wl.decode_tokens, wl.source_row)
    phases["workload_s"] = time.perf_counter() - t
    t = time.perf_counter()
    timing_key = (model, device, node, cfg.cluster.tp, cfg.cluster.pp, cfg.predictor)
    timing_key += (setup.profile_block_size,)
    timing = timing_cache.get(timing_key) if timing_cache is not None else None
    if timing is None:
        timing = build_timing(
            model,
            device,
            node,
            cfg.cluster.tp,
            cfg.cluster.pp,
            cfg.predictor,
            block_size=setup.profile_block_size,
            progress=progress,
        )
        if timing_cache is not None:
            timing_cache[timing_key] = timing
    phases["timing_s"] = time.perf_counter() - t
    # one Generator per purpose, seeded from the config seed
    u_route = np.random.default_rng([cfg.seed, 1]).random(len(wl))
    grids = timing.grids._replace(counters=np.zeros_like(timing.grids.counters))
    engine_arrival_s = wl.arrival_s
    response_s = 0.0
    if closed_plan is None:  # the closed loop runs its front end inside the engine
        w = cfg.workload
        service = service_s(w.ingest_ms, w.ingest_us_per_token, wl.prompt_tokens)
        engine_arrival_s = engine_arrivals(wl.arrival_s, service)
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
        setup.params,
        u_route,
        cfg.time_limit_s,
        progress,
        closed_loop=closed_plan,
        hashes=wl.hashes if need_hashes and wl.has_hashes else None,
        compress_batches=cfg.output.dir is not None and cfg.output.write_metrics_h5,
    )
    phases["jit_s"] = out.jit_s
    phases["loop_s"] = out.loop_s
    phases["loop_cpu_s"] = out.loop_cpu_s
    t = time.perf_counter()
    out.kv = without_pool(out.kv)
    arrival_s = wl.arrival_s if closed_plan is None else closed_loop_arrivals(out.reqs)
    req = request_metrics(out.reqs, arrival_s, response_s)
    if closed_plan is not None:
        req = closed_loop_metrics(req, closed_plan, out.closed_loop)
    replicas = replica_table(out, setup.params, out.end_ns)
    c = grids.counters
    clamped = {
        "tokens": int(c[CLAMP_TOKENS]),
        "decode_batch": int(c[CLAMP_DECODE_BATCH]),
        "decode_kv": int(c[CLAMP_DECODE_KV]),
        "prefill_kv": int(c[CLAMP_PREFILL_KV]),
        "prefill_chunk": int(c[CLAMP_PREFILL_CHUNK]),
    }
    summary = build_summary(
        req if closed_plan is None else req[req["in_window"]],
        replicas,
        out.hist,
        out.end_ns / NS_PER_S,
        cfg.cluster.tp * cfg.cluster.pp,
        device.price_per_hour_usd,
        clamped,
        out.status,
    )
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
