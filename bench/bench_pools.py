"""A heterogeneous mixed cluster against the homogeneous ones at equal GPU count.

Llama-3-8B, vllm_v1, lor router, one synthetic workload (Poisson arrivals, uniform 256-4096
tokens, prompt:output 10:1). Deployments: 4 x H100, 4 x A100, and 2 x H100 + 2 x A100 as two
pools behind the one router. Per deployment: TTFT and TPOT p50/p99, throughput, per-pool busy
fraction, cost per 1k requests. The last line is one summary.

The timing source is the roofline by default (every device, no measured tables needed); pass
--source aiconfigurator for the measured tables where they cover the devices.

    .venv/bin/python bench/bench_pools.py [--requests 3000] [--qps 20] [--source roofline]
"""

import argparse
import time

from vidur_fast.api import simulate
from vidur_fast.config.convert import build_dataclass
from vidur_fast.config.sim import SimConfig

MODEL = "meta-llama/Meta-Llama-3-8B"
DEPLOYMENTS = {
    "4 x h100": {"device": "h100", "num_replicas": 4},
    "4 x a100": {"device": "a100", "num_replicas": 4},
    "2 x h100 + 2 x a100": {
        "pools": [{"device": "h100", "num_replicas": 2}, {"device": "a100", "num_replicas": 2}]
    },
}


def synthetic_workload(requests: int, qps: float) -> dict:
    """The benches' workload: uniform lengths 256-4,096 tokens at 10:1 prefill:decode,
    Poisson arrivals at qps."""
    return {
        "type": "synthetic",
        "num_requests": requests,
        "lengths": {
            "type": "uniform",
            "min_tokens": 256,
            "max_tokens": 4096,
            "prefill_to_decode_ratio": 10,
        },
        "intervals": {"type": "poisson", "qps": qps},
    }


def config(cluster: dict, requests: int, qps: float, source: str) -> SimConfig:
    return build_dataclass(
        SimConfig,
        {
            "cluster": {"model": MODEL, **cluster},
            "predictor": {"source": source},
            "router": "lor",
            "quiet": True,
            "workload": synthetic_workload(requests, qps),
        },
        "",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--qps", type=float, default=20.0)
    ap.add_argument("--source", default="roofline")
    args = ap.parse_args()
    cache: dict = {}
    rows = {}
    head = (
        f"{'deployment':<22}{'TTFT p50':>10}{'TTFT p99':>10}{'TPOT p50':>10}{'TPOT p99':>10}"
        f"{'req/s':>8}{'$/1k req':>10}  busy per pool"
    )
    print(head)
    for name, cluster in DEPLOYMENTS.items():
        t = time.perf_counter()
        s = simulate(config(cluster, args.requests, args.qps, args.source), timing_cache=cache)
        s = s.summary
        ttft, tpot = s["prefill_e2e_time"], s["decode_time_execution_plus_preemption_normalized"]
        busy = " / ".join(f"{p['device']} {100 * p['busy_fraction_mean']:.0f}%" for p in s["pools"])
        rows[name] = s
        print(
            f"{name:<22}{ttft['p50']:>10.3f}{ttft['p99']:>10.3f}{1e3 * tpot['p50']:>10.2f}"
            f"{1e3 * tpot['p99']:>10.2f}{s['throughput_requests_per_s']:>8.2f}"
            f"{s['cost_per_1k_requests_usd']:>10.4f}  {busy}   ({time.perf_counter() - t:.1f} s)"
        )
    mixed = rows["2 x h100 + 2 x a100"]
    h100, a100 = rows["4 x h100"], rows["4 x a100"]
    print(
        f"summary: mixed pools TTFT p99 {mixed['prefill_e2e_time']['p99']:.3f} s (4 x h100 "
        f"{h100['prefill_e2e_time']['p99']:.3f} s, 4 x a100 "
        f"{a100['prefill_e2e_time']['p99']:.3f} s); cost per 1k requests "
        f"${mixed['cost_per_1k_requests_usd']:.4f} vs ${h100['cost_per_1k_requests_usd']:.4f}"
        f" / ${a100['cost_per_1k_requests_usd']:.4f}"
    )


if __name__ == "__main__":
    main()
