"""Capacity search at scale: ~100 simulations (deployments x bracketing/bisection probes).

Llama-3-8B on H100 with the default timing model (aiconfigurator): TP 1/2 x replicas 1/2 x
{vllm_v1, sarathi} = 8 deployments, each searched for the highest Poisson QPS with
p90 TTFT <= 2 s, p99 TBT <= 0.2 s and p99 scheduling delay <= 1 s (2% tolerance), on a
synthetic workload of --requests requests (uniform 256-4096 tokens, prompt:output 10:1).

Grids are built (or loaded from the cache) first and timed separately, so the search time
is simulations plus process start-up. Target: search <= 10 min on 2 cores.

    .venv/bin/python bench/bench_capacity.py [--workers 2] [--requests 2000] [--executor local]
"""

import argparse
import json
import os
import tempfile
import time

import bench_pools

from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.explore.run_capacity import run_capacity
from vidur_fast.timing.build import build_timing

MODEL, DEVICE = "meta-llama/Meta-Llama-3-8B", "h100"
TPS = (1, 2)


def capacity_file(requests: int) -> dict:
    return {
        "base": {
            "cluster": {"model": MODEL, "device": DEVICE},
            "workload": bench_pools.synthetic_workload(requests, 1.0),
        },
        "grid": {
            "tp": list(TPS),
            "num_replicas": [1, 2],
            "scheduler": ["vllm_v1", {"type": "sarathi", "chunk_size": 512}],
        },
        "capacity": {
            "slo": {"ttft_p90": 2.0, "tbt_p99": 0.2, "scheduling_delay_p99": 1.0},
            "start_qps": 1.0,
            "rel_tol": 0.02,
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--executor", default="local", choices=("local", "ray"))
    ap.add_argument("--out", default=None, help="output dir (default: a fresh temp dir)")
    args = ap.parse_args()

    t = time.perf_counter()
    for tp in TPS:
        build_timing(MODEL, DEVICE, None, tp, 1, PredictorConfig())
    grids_s = time.perf_counter() - t

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "capacity.json")
        with open(path, "w") as f:
            json.dump(capacity_file(args.requests), f)
        out = args.out or os.path.join(tmp, "out")
        t = time.perf_counter()
        res = run_capacity(path, out, executor=args.executor, workers=args.workers, quiet=True)
        search_s = time.perf_counter() - t
    n_sims = len(res.probes)
    cols = [
        "label",
        "status",
        "capacity_qps",
        "num_probes",
        "cost_per_hour_usd",
        "qps_per_usd_hour",
        "prefill_e2e_time_p90",
        "pareto",
    ]
    print(res.table[cols].to_string(index=False))
    print(f"cpu cores: {os.cpu_count()}, workers: {args.workers}, executor: {args.executor}")
    print(f"grids (build or cache load, {len(TPS)} sets): {grids_s:.1f} s")
    print(
        f"capacity search: {len(res.table)} deployments, {n_sims} simulations of "
        f"{args.requests} requests, wall {search_s:.1f} s "
        f"({search_s / max(n_sims, 1):.2f} s per simulation)"
    )


if __name__ == "__main__":
    main()
