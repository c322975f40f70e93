"""Mooncake conversation trace on 8 replicas with prefix caching and the prefix-aware router.

Prints whole-process wall time (interpreter start to exit), the engine loop time, peak RSS
and the prefix-cache hit rate per replica. Run twice: the first run also fills the Numba and
timing-grid caches (cold), the second shows the warm figures (target: <= 3 s whole process).

    .venv/bin/python bench/bench_mooncake.py [--trace PATH] [--replicas 8] [--requests N]
"""

import argparse
import os
import resource
import sys
import time
from pathlib import Path

T_START = time.perf_counter()

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[1].parent
    / "shared/traces/mooncake/conversation_trace.jsonl.gz"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--model", default="meta-llama/Llama-3.1-8B")
    ap.add_argument("--device", default="h100")
    ap.add_argument("--router", choices=("prefix_aware", "lop", "sticky"), default="prefix_aware")
    args = ap.parse_args()
    if not os.path.exists(args.trace):
        sys.exit(f"error: trace not found: {args.trace}")

    from vidur_fast.api import simulate
    from vidur_fast.config.sim import (
        ClusterConfig,
        LeastOutstandingPrefillRouter,
        PrefixAwareRouter,
        SimConfig,
        StickyRouter,
        VllmV1Scheduler,
    )
    from vidur_fast.config.workload import TraceWorkload

    router = {
        "prefix_aware": PrefixAwareRouter(),
        "lop": LeastOutstandingPrefillRouter(),
        "sticky": StickyRouter(),
    }[args.router]
    cfg = SimConfig(
        cluster=ClusterConfig(model=args.model, device=args.device, num_replicas=args.replicas),
        workload=TraceWorkload(args.trace, format="mooncake", num_requests=args.requests),
        scheduler=VllmV1Scheduler(enable_prefix_caching=True),
        router=router,
        quiet=True,
    )
    t_imports = time.perf_counter() - T_START
    res = simulate(cfg)
    s = res.summary
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"trace            {args.trace}")
    done, rej = s["num_completed"], s["num_rejected"]
    print(f"requests         {s['num_requests']} ({done} completed, {rej} rejected)")
    print(f"model            {args.model} on {args.device}")
    print(f"router           {args.router}, replicas {args.replicas}")
    print(f"imports+setup    {t_imports:.2f} s")
    for k, v in res.phases_s.items():
        print(f"phase {k:<10} {v:.3f} s")
    print(f"loop time        {res.phases_s['loop_s']:.3f} s")
    print(f"peak RSS         {rss_mb:.0f} MiB")
    print(f"hit rate (all)   {s['prefix_cache_hit_rate']:.4f}")
    print(f"evictions        {s['prefix_cache_evictions']}")
    for r, rate in enumerate(s["prefix_cache_hit_rate_per_replica"]):
        print(f"  replica {r}: hit rate {rate:.4f}")
    ttft = s["prefill_e2e_time"]
    nan = float("nan")
    print(f"TTFT p50/p99     {ttft.get('p50', nan):.3f} / {ttft.get('p99', nan):.3f} s")
    print(f"wall (process)   {time.perf_counter() - T_START:.2f} s")


if __name__ == "__main__":
    main()
