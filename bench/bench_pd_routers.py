"""Routers over prefill/decode pools: one workload on a 2P2D H100 cluster under each router,
and on mixed pools of two GPU types with routers of their own.

(1) 2P2D (Llama-3-8B, H100 TP1, vllm_v1 without prefix caching or async scheduling, roofline
timing; Poisson arrivals, uniform 256-4096 tokens, prompt:output 10:1): the cluster router
picks the prefill replica and, at each hand-off, the decode replica. TTFT and TPOT p50/p99,
goodput under an SLO, and the spread of requests over the decode replicas.
(2) 2 x H100 + 2 x A100 mixed pools, cluster router lor: without pool routers, and with lop
in each pool (the cluster router picks the pool, the pool's router the replica). The last
line is one summary.

    .venv/bin/python bench/bench_pd_routers.py [--requests 2000] [--qps 20] [--source roofline]
"""

import argparse
import time

import bench_pools
import numpy as np

from vidur_fast.api import simulate
from vidur_fast.config.convert import build_dataclass
from vidur_fast.config.sim import SimConfig

MODEL = "meta-llama/Meta-Llama-3-8B"
SCHED = {"type": "vllm_v1", "enable_prefix_caching": False, "async_scheduling": False}
SLO_TTFT_S = 0.5
SLO_TPOT_S = 0.05
PD_ROUTERS = ["round_robin", "random", "lor", "least_waiting", "lop", "lop_binary"]
PD_2P2D = [
    {"device": "h100", "num_replicas": 2, "role": "prefill"},
    {"device": "h100", "num_replicas": 2, "role": "decode"},
]


def config(pools: list, router: str, workload: dict, source: str) -> SimConfig:
    return build_dataclass(
        SimConfig,
        {
            "cluster": {"model": MODEL, "pools": pools},
            "predictor": {"source": source},
            "scheduler": SCHED,
            "router": router,
            "quiet": True,
            "workload": workload,
        },
        "",
    )


def row(name: str, res, t0: float) -> float:
    """Print one result line; returns its TPOT p99 (s)."""
    q = res.requests
    ttft = q["prefill_e2e_time"]
    tpot = q["decode_time_execution_plus_preemption_normalized"]
    ok = q["completed"] & (ttft <= SLO_TTFT_S) & (tpot <= SLO_TPOT_S)
    good = ok.sum() / res.summary["simulated_time_s"]
    share = np.bincount(q["replica"]) / len(q)
    print(
        f"{name:<22}{ttft.quantile(0.5):>10.3f}{ttft.quantile(0.99):>10.3f}"
        f"{1e3 * tpot.quantile(0.5):>10.2f}{1e3 * tpot.quantile(0.99):>10.2f}{good:>9.2f}"
        f"   {' '.join(f'{x:.2f}' for x in share if x > 0)}   ({time.perf_counter() - t0:.1f} s)"
    )
    return float(tpot.quantile(0.99))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--qps", type=float, default=20.0)
    ap.add_argument("--source", default="roofline")
    args = ap.parse_args()
    wl = bench_pools.synthetic_workload(args.requests, args.qps)
    cache: dict = {}
    head = (
        f"{'TTFT p50':>10}{'TTFT p99':>10}{'TPOT p50':>10}{'TPOT p99':>10}{'goodput':>9}"
        "   share of requests per serving replica"
    )
    print(f"(1) 2P2D, {args.requests} requests at {args.qps:g} QPS")
    print(f"{'router':<22}{head}")
    tpot = {}
    for router in PD_ROUTERS:
        t0 = time.perf_counter()
        res = simulate(config(PD_2P2D, router, wl, args.source), timing_cache=cache)
        tpot[router] = row(router, res, t0)
    print("(2) 2 x h100 + 2 x a100 mixed pools, cluster router lor")
    print(f"{'pool routers':<22}{head}")
    mixed = [{"device": "h100", "num_replicas": 2}, {"device": "a100", "num_replicas": 2}]
    for name, own in (("none", None), ("lop in each pool", "lop")):
        t0 = time.perf_counter()
        pools = [{**p, "router": own} for p in mixed]
        row(name, simulate(config(pools, "lor", wl, args.source), timing_cache=cache), t0)
    print(
        f"summary: 2P2D TPOT p99 {1e3 * tpot['lor']:.2f} ms with lor (counts requests until "
        f"they finish), {1e3 * tpot['lop']:.2f} ms with lop (counts a hand-off until its "
        "first decode step)"
    )


if __name__ == "__main__":
    main()
