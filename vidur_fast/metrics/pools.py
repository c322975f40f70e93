"""Per-pool figures of a run: utilisation, queueing, throughput and cost of each pool."""

import numpy as np

from vidur_fast.kernels.dtypes import NEVER, NS_PER_S
from vidur_fast.kernels.pd import LINK_NET, LINK_NVLINK

LINK_KINDS = (("network", LINK_NET), ("nvlink", LINK_NVLINK))


def _p(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if x.size else None


def _mean(x: np.ndarray) -> float:
    """The mean of the non-NaN values (NaN when there are none), as pandas' Series.mean."""
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else float("nan")


def pool_summary(
    req,
    replicas,
    pools: list[dict],
    sim_time_s: float,
    queued_replica: np.ndarray | None = None,
) -> list[dict]:
    """One entry per pool, in pool order. pools: per pool its placement (device, node, tp,
    pp, role, replicas) and price_per_gpu_hour_usd; replicas carries a `pool` column and req
    a `replica` column. Queueing is the scheduling delay (arrival to first scheduled) of the
    pool's completed requests; cost is the pool's GPUs at its device's price over the run.
    queued_replica: per request of req, the replica where it queued first (disaggregated
    serving: its prefill replica), whose pool then counts its queueing; None = req's."""
    rep_pool = np.asarray(replicas["pool"])
    req_rep = np.asarray(req["replica"])
    done = np.asarray(req["completed"]).astype(bool)
    req_pool = np.where(req_rep >= 0, rep_pool[np.maximum(req_rep, 0)], -1)
    q_rep = req_rep if queued_replica is None else np.asarray(queued_replica)
    q_pool = np.where(q_rep >= 0, rep_pool[np.maximum(q_rep, 0)], -1)
    out = []
    for k, pool in enumerate(pools):
        mine = rep_pool == k
        sel = (req_pool == k) & done
        delay = np.asarray(req["request_scheduling_delay"])[(q_pool == k) & done]
        dec = np.asarray(req["request_num_decode_tokens"])[sel]
        pre = np.asarray(req["request_num_prefill_tokens"])[sel]
        blocks = np.asarray(replicas["num_blocks"])[mine]
        gpus = pool["tp"] * pool["pp"] * pool["replicas"]
        cost = pool["price_per_gpu_hour_usd"] * gpus * sim_time_s / 3600.0
        n_done = int(sel.sum())
        per_s = 1.0 / sim_time_s if sim_time_s > 0 else 0.0
        out.append(
            {
                "pool": k,
                **{key: pool[key] for key in ("device", "node", "tp", "pp", "role", "replicas")},
                "gpus": gpus,
                "num_blocks_per_replica": int(blocks[0]) if blocks.size else 0,
                "busy_fraction_mean": _mean(np.asarray(replicas["busy_fraction"])[mine]),
                "kv_usage_mean": _mean(np.asarray(replicas["kv_usage_mean"])[mine]),
                "num_completed": n_done,
                "num_preemptions": int(np.asarray(replicas["preemptions"])[mine].sum()),
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


def pd_summary(state, reqs, link: dict, ids: np.ndarray) -> dict:
    """Disaggregated serving of the requests ids (kernels/pd.py state after the run): the
    link, the KV transfers (count, bytes, duration), the wait between a prefill's end and
    its transfer's start, the hand-offs that queued for decode KV blocks, and the time from a
    prefill's end to the first token (wait, transfer and the decode side's first step)."""
    ids = np.asarray(ids, dtype=np.int64)
    started = ids[state.start_ns[ids] != NEVER]
    ended = started[reqs.replica[started] == state.dst[started]]
    dur_s = (state.end_ns[ended] - state.start_ns[ended]) / NS_PER_S
    wait_s = (state.start_ns[started] - state.handoff_ns[started]) / NS_PER_S
    handed = ids[state.handoff_ns[ids] != NEVER]
    # the client's first token comes from the decode side: the part of TTFT after the prefill
    firsts = handed[reqs.first_tok_ns[handed] != NEVER]
    after_s = (reqs.first_tok_ns[firsts] - state.handoff_ns[firsts]) / NS_PER_S
    return {
        **link,
        "num_handoffs": int(handed.size),
        "num_transfers": int(ended.size),
        "bytes_moved": int(state.nbytes[ended].sum()),
        "by_link": {
            name: {
                "num_transfers": int((state.kind[ended] == k).sum()),
                "bytes_moved": int(state.nbytes[ended][state.kind[ended] == k].sum()),
            }
            for name, k in LINK_KINDS
        },
        "transfer_time_mean_s": float(dur_s.mean()) if dur_s.size else None,
        "transfer_time_p50_s": _p(dur_s, 50),
        "transfer_time_p99_s": _p(dur_s, 99),
        "transfer_time_max_s": float(dur_s.max()) if dur_s.size else None,
        "num_waited_for_decode_kv": int(state.waited[handed].sum()),
        "decode_kv_wait_mean_s": float(wait_s.mean()) if wait_s.size else None,
        "decode_kv_wait_p99_s": _p(wait_s, 99),
        "prefill_end_to_first_token_mean_s": float(after_s.mean()) if after_s.size else None,
        "prefill_end_to_first_token_p99_s": _p(after_s, 99),
    }


def pd_request_columns(req, state):
    """The request table (one row per request id) with the disaggregation columns: prefill
    replica (-1: served mixed), the end of its prefill step there (s; NaN: none), KV transfer
    start and end, bytes moved, and whether the hand-off waited for decode KV blocks."""

    def at(ns):
        return np.where(ns != NEVER, ns / NS_PER_S, np.nan)

    return req.assign(
        prefill_replica=state.src.astype(np.int64),
        prefill_end_at=at(state.handoff_ns),
        kv_transfer_start_at=at(state.start_ns),
        kv_transfer_end_at=at(state.end_ns),
        kv_transfer_bytes=state.nbytes.astype(np.int64),
        waited_for_decode_kv=state.waited.astype(bool),
    )


def busy_union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of the intervals [start, end) (ns): the time at least one is
    open."""
    if start.size == 0:
        return 0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    # a new run of overlapping intervals begins where an interval starts after all before it
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return int((reach[last] - s[first]).sum())


def pd_link_summary(state, reqs, ids: np.ndarray, link: dict, sim_time_s: float):
    """Per egress link of a prefill replica (its network link, and its NVLink when a decode
    replica shares its node) the transfers of the requests ids that ended: count, bytes, the
    share of the simulated time with a transfer in flight (`busy_fraction`) and bytes /
    (bandwidth x simulated time) (`bandwidth_use_fraction`; above 1 only without contention,
    where overlapping transfers do not share the link)."""
    ids = np.asarray(ids, dtype=np.int64)
    started = ids[state.start_ns[ids] != NEVER]
    ended = started[reqs.replica[started] == state.dst[started]]
    span_ns = sim_time_s * NS_PER_S
    node = np.asarray(state.node)
    decode_nodes = set(node[np.asarray(state.decode_ids)].tolist())
    bws = {"network": link["bandwidth_gbps"], "nvlink": link["intra_node_bandwidth_gbps"]}
    out = []
    for r in np.asarray(state.prefill_ids).tolist():
        for name, k in LINK_KINDS:
            if k == LINK_NVLINK and int(node[r]) not in decode_nodes:
                continue
            mine = ended[(state.src[ended] == r) & (state.kind[ended] == k)]
            nbytes = int(state.nbytes[mine].sum())
            busy = busy_union_ns(state.start_ns[mine], state.end_ns[mine])
            out.append(
                {
                    "replica": int(r),
                    "link": name,
                    "num_transfers": int(mine.size),
                    "bytes_moved": nbytes,
                    "busy_fraction": busy / span_ns if span_ns > 0 else 0.0,
                    "bandwidth_use_fraction": (
                        nbytes / (bws[name] * span_ns) if span_ns > 0 else 0.0
                    ),
                }
            )
    return out
