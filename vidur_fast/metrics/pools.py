"""Per-pool figures of a run: utilisation, queueing, throughput and cost of each pool."""

import numpy as np
import pandas as pd


def _p(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if x.size else None


def pool_summary(
    req: pd.DataFrame,
    replicas: pd.DataFrame,
    pools: list[dict],
    sim_time_s: float,
) -> list[dict]:
    """One entry per pool, in pool order. pools: per pool its placement (device, node, tp,
    pp, role, replicas) and price_per_gpu_hour_usd; replicas carries a `pool` column and req
    a `replica` column. Queueing is the scheduling delay (arrival to first scheduled) of the
    pool's completed requests; cost is the pool's GPUs at its device's price over the run."""
    rep_pool = replicas["pool"].to_numpy()
    req_rep = req["replica"].to_numpy()
    done = req["completed"].to_numpy().astype(bool)
    req_pool = np.where(req_rep >= 0, rep_pool[np.maximum(req_rep, 0)], -1)
    out = []
    for k, pool in enumerate(pools):
        mine = replicas[rep_pool == k]
        sel = (req_pool == k) & done
        delay = req["request_scheduling_delay"].to_numpy()[sel]
        dec = req["request_num_decode_tokens"].to_numpy()[sel]
        pre = req["request_num_prefill_tokens"].to_numpy()[sel]
        gpus = pool["tp"] * pool["pp"] * pool["replicas"]
        cost = pool["price_per_gpu_hour_usd"] * gpus * sim_time_s / 3600.0
        n_done = int(sel.sum())
        per_s = 1.0 / sim_time_s if sim_time_s > 0 else 0.0
        out.append(
            {
                "pool": k,
                **{key: pool[key] for key in ("device", "node", "tp", "pp", "role", "replicas")},
                "gpus": gpus,
                "num_blocks_per_replica": int(mine["num_blocks"].iloc[0]) if len(mine) else 0,
                "busy_fraction_mean": float(mine["busy_fraction"].mean()),
                "kv_usage_mean": float(mine["kv_usage_mean"].mean()),
                "num_completed": n_done,
                "num_preemptions": int(mine["preemptions"].sum()),
                "throughput_requests_per_s": n_done * per_s,
                "throughput_output_tokens_per_s": float(dec.sum()) * per_s,
                "throughput_total_tokens_per_s": float((dec + pre).sum()) * per_s,
                "scheduling_delay_mean_s": float(delay.mean()) if delay.size else None,
                "scheduling_delay_p50_s": _p(delay, 50),
                "scheduling_delay_p99_s": _p(delay, 99),
                "price_per_gpu_hour_usd": pool["price_per_gpu_hour_usd"],
                "cost_usd": cost,
            }
        )
    return out
