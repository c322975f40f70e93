"""Prefill/decode disaggregation: the hand-off's timing on an idle 1P1D cluster, then
aggregated against disaggregated deployments at equal GPU count.

(1) One request (Llama-3-8B, 2,000-token prompt, 2 output tokens) on an idle 1P1D H100
cluster: the prefill step's token is discarded (the proxy's max_tokens=1); the first token
(TTFT) comes after the KV transfer (latency + bytes / bandwidth) and the decode side's first
step (one token: the last prompt token recomputed), the second one decode step later.
Checked to the nanosecond against the batch log and the transfer figure computed here, with
the two TP1 replicas placed on one node (placement packed: NVLink, 450 GB/s) and on two
(separate_nodes: the network, 50 GB/s), 3 us of latency either way. Then
two such requests 20 ms apart over a 5 GB/s network link (separate_nodes) with fair-share
contention: the second
transfer starts while the first sends, the two split the link, both transfer ends are
checked to the nanosecond against processor sharing worked out here, and each TTFT is its
prefill step's end + transfer + its decode-side first step.
(2) One synthetic workload (Poisson arrivals, uniform 256-4096 tokens, prompt:output 10:1)
on 2 aggregated replicas vs 1P1D, and on 3 aggregated replicas vs 1P2D and 2P1D (H100 TP1,
vllm_v1 with async scheduling (its default), without prefix caching, lor): TTFT and TPOT
p50/p99, goodput under an SLO, cost.
(3) The same workload on 4 GPUs: the homogeneous 4 x H100 and 4 x A100 against the
heterogeneous 2 x H100 + 2 x A100 as two mixed pools (bench/bench_pools.py's deployments),
and the same GPUs disaggregated, prefill on the H100s and decode on the A100s (2P h100 +
2D a100). The last line is one summary.

    .venv/bin/python bench/bench_pd.py [--requests 2000] [--qps 16] [--source roofline]
"""

import argparse
import time

import bench_pools

from vidur_fast.api import simulate
from vidur_fast.catalog import get_model, get_node
from vidur_fast.config.convert import build_dataclass
from vidur_fast.config.sim import SimConfig
from vidur_fast.params.memory import kv_bytes_per_token

MODEL = "meta-llama/Meta-Llama-3-8B"
# vllm_v1's defaults (async scheduling on); prefix caching off: the workload shares no prefixes
SCHED = {"type": "vllm_v1", "enable_prefix_caching": False}
SLO_TTFT_S = 0.5
SLO_TPOT_S = 0.05


def _pd(n_prefill: int, n_decode: int) -> dict:
    return {
        "pools": [
            {"device": "h100", "num_replicas": n_prefill, "role": "prefill"},
            {"device": "h100", "num_replicas": n_decode, "role": "decode"},
        ]
    }


# (3): bench_pools.py's homogeneous and mixed clusters, and the mixed GPUs disaggregated
HETERO = {
    **bench_pools.DEPLOYMENTS,
    "2P h100 + 2D a100": {
        "pools": [
            {"device": "h100", "num_replicas": 2, "role": "prefill"},
            {"device": "a100", "num_replicas": 2, "role": "decode"},
        ]
    },
}

DEPLOYMENTS = {
    "2 aggregated": {"device": "h100", "num_replicas": 2},
    "1P1D": _pd(1, 1),
    "3 aggregated": {"device": "h100", "num_replicas": 3},
    "1P2D": _pd(1, 2),
    "2P1D": _pd(2, 1),
}


def config(cluster: dict, workload: dict, source: str) -> SimConfig:
    return build_dataclass(
        SimConfig,
        {
            "cluster": {"model": MODEL, **cluster},
            "predictor": {"source": source},
            "scheduler": SCHED,
            "router": "lor",
            "quiet": True,
            "workload": workload,
        },
        "",
    )


def single_request(source: str, cache: dict, placement: str) -> None:
    prompt = 2000
    wl = {
        "type": "synthetic",
        "num_requests": 1,
        "lengths": {"type": "FixedLengths", "prefill_tokens": prompt, "decode_tokens": 2},
        "intervals": "StaticIntervals",
        "ingest_ms": 0.0,
    }
    cluster = {**_pd(1, 1), "kv_transfer": {"placement": placement}}
    res = simulate(config(cluster, wl, source), timing_cache=cache)
    b = res.batch_log.frame_ns()
    assert b["replica"].tolist() == [0, 1, 1], b
    pre, dec, dec2 = b.iloc[0], b.iloc[1], b.iloc[2]
    prefill_ns = int(pre["end_ns"] - pre["start_ns"])
    decode_ns = int(dec["end_ns"] - dec["start_ns"])
    node = get_node("h100_dgx")
    nbytes = prompt * kv_bytes_per_token(get_model(MODEL), 1, get_model(MODEL).num_layers)
    packed = placement == "packed"
    bw = node.nvlink_bandwidth_gbps if packed else node.inter_node_bandwidth_gbps
    xfer_ns = round(node.p2p_latency_us * 1000) + round(nbytes / bw)
    assert res.summary["pd"]["by_link"]["nvlink" if packed else "network"]["num_transfers"] == 1
    r = res.requests.iloc[0]
    first_ns = round(r["prefill_completed_at"] * 1e9)
    second_ns = round(r["completed_at"] * 1e9)
    assert int(pre["start_ns"]) == 0 and int(dec["start_ns"]) == prefill_ns + xfer_ns
    assert int(dec["num_tokens"]) == 1 and int(dec2["num_tokens"]) == 1
    assert round(r["prefill_end_at"] * 1e9) == prefill_ns
    ttft = prefill_ns + xfer_ns + decode_ns
    assert first_ns == ttft, (first_ns, prefill_ns, xfer_ns, decode_ns)
    assert second_ns == ttft + int(dec2["end_ns"] - dec2["start_ns"]), (second_ns, ttft)
    assert round(res.summary["pd"]["transfer_time_p50_s"] * 1e9) == xfer_ns
    print(
        f"(1) idle 1P1D, {placement}, {prompt}-token prompt: prefill step {prefill_ns} ns, "
        f"transfer {xfer_ns} ns ({nbytes} B over {'NVLink' if packed else 'the network'} at "
        f"{bw:g} GB/s + {node.p2p_latency_us:g} us), decode-side first step {decode_ns} ns"
    )
    print(
        f"    TTFT {first_ns} ns = prefill step + transfer + decode-side step (exact); second "
        f"token at {second_ns} ns"
    )


def two_requests_contention(source: str, cache: dict) -> None:
    """Two 2,000-token prompts, 20 ms apart, 1P1D, a 5 GB/s link shared fair: transfers
    start at the prefill ends t0 < t1; at t1 the first has R = B - (t1 - t0) x bw bytes left,
    which take 2R / bw at half the bandwidth; the second then has B - R left at full bandwidth.
    Each ends the latency after its last byte."""
    prompt, bw = 2000, 5.0
    wl = {
        "type": "synthetic",
        "num_requests": 2,
        "lengths": {"type": "FixedLengths", "prefill_tokens": prompt, "decode_tokens": 2},
        "intervals": {"type": "UniformIntervals", "qps": 50.0},
        "ingest_ms": 0.0,
    }
    link = {"bandwidth_gbps": bw, "contention": "fair_share", "placement": "separate_nodes"}
    cluster = {**_pd(1, 1), "kv_transfer": link}
    res = simulate(config(cluster, wl, source), timing_cache=cache)
    b = res.batch_log.frame_ns()
    t0, t1 = (int(x) for x in b[b["replica"] == 0]["end_ns"])
    nbytes = prompt * kv_bytes_per_token(get_model(MODEL), 1, get_model(MODEL).num_layers)
    lat_ns = round(get_node("h100_dgx").p2p_latency_us * 1000)
    left = nbytes - (t1 - t0) * bw
    assert 0 < left < nbytes, (t0, t1)
    first_last = t1 + round(2 * left / bw)
    want = [first_last + lat_ns, first_last + round((nbytes - left) / bw) + lat_ns]
    r = res.requests
    start = [round(x * 1e9) for x in r["kv_transfer_start_at"]]
    end = [round(x * 1e9) for x in r["kv_transfer_end_at"]]
    assert start == [t0, t1], (start, t0, t1)
    assert end == want, (end, want)
    # each first token: the decode side's step that starts at the transfer's end
    dec = b[b["replica"] == 1]
    ttft = []
    for k in range(2):
        step = dec[dec["start_ns"] == end[k]]
        assert len(step) == 1, (dec, end)
        ttft.append(end[k] + int(step["end_ns"].iloc[0] - step["start_ns"].iloc[0]))
    got = [round(x * 1e9) for x in r["prefill_completed_at"]]
    assert got == ttft, (got, ttft)
    alone = round(nbytes / bw) + lat_ns
    print(
        f"    fair share, 2 requests 20 ms apart at {bw:g} GB/s: transfers start at {t0} and "
        f"{t1} ns, end at {end[0]} and {end[1]} ns (exact; alone each would take {alone} ns, "
        f"shared {end[0] - t0} and {end[1] - t1} ns); first tokens at {ttft[0]} and "
        f"{ttft[1]} ns = transfer end + decode-side step (exact)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--qps", type=float, default=16.0)
    ap.add_argument("--source", default="roofline")
    args = ap.parse_args()
    cache: dict = {}
    single_request(args.source, cache, "packed")
    single_request(args.source, cache, "separate_nodes")
    two_requests_contention(args.source, cache)
    wl = bench_pools.synthetic_workload(args.requests, args.qps)
    print(
        f"(2) {args.requests} requests at {args.qps:g} QPS; goodput: requests/s meeting "
        f"TTFT <= {SLO_TTFT_S} s and TPOT <= {1e3 * SLO_TPOT_S:g} ms"
    )
    head = (
        f"{'deployment':<14}{'GPUs':>5}{'TTFT p50':>10}{'TTFT p99':>10}{'TPOT p50':>10}"
        f"{'TPOT p99':>10}{'goodput':>9}{'$/1k req':>10}{'xfer p99 ms':>12}"
    )
    print(head)
    rows = {name: _row(name, c, wl, args.source, cache) for name, c in DEPLOYMENTS.items()}
    print("(3) 4 GPUs, the same workload: homogeneous, heterogeneous, heterogeneous PD")
    print(f"{'deployment':<20}" + head[14:])
    het = {name: _row(name, c, wl, args.source, cache, 20) for name, c in HETERO.items()}
    best = max(rows, key=lambda k: rows[k][2] / rows[k][3]["gpus"])
    mixed, pd_het = het["2 x h100 + 2 x a100"], het["2P h100 + 2D a100"]
    print(
        f"summary: exact 1P1D hand-off timing, alone and fair-shared; TPOT p99 1P1D "
        f"{1e3 * rows['1P1D'][1]:.2f} ms vs "
        f"2 aggregated {1e3 * rows['2 aggregated'][1]:.2f} ms; most goodput per GPU: {best} "
        f"({rows[best][2] / rows[best][3]['gpus']:.2f} req/s per GPU); on 4 GPUs the mixed "
        f"h100 + a100 pools reach goodput {mixed[2]:.2f} req/s (4 x h100 "
        f"{het['4 x h100'][2]:.2f}, 4 x a100 {het['4 x a100'][2]:.2f}), disaggregated "
        f"{pd_het[2]:.2f}"
    )


def _row(name: str, cluster: dict, wl: dict, source: str, cache: dict, width: int = 14):
    """Simulate one deployment and print its line: (TTFT p99, TPOT p99, goodput, summary)."""
    t = time.perf_counter()
    res = simulate(config(cluster, wl, source), timing_cache=cache)
    s = res.summary
    q = res.requests
    # the client's view as the run's request metrics give it
    ttft = q["prefill_e2e_time"]
    tpot = q["decode_time_execution_plus_preemption_normalized"]
    ok = q["completed"] & (ttft <= SLO_TTFT_S) & (tpot <= SLO_TPOT_S)
    good = ok.sum() / s["simulated_time_s"]
    xfer = s.get("pd", {}).get("transfer_time_p99_s")
    xfer_txt = f"{1e3 * xfer:.2f}" if xfer is not None else "-"
    print(
        f"{name:<{width}}{s['gpus']:>5}{ttft.quantile(0.5):>10.3f}{ttft.quantile(0.99):>10.3f}"
        f"{1e3 * tpot.quantile(0.5):>10.2f}{1e3 * tpot.quantile(0.99):>10.2f}"
        f"{good:>9.2f}{s['cost_per_1k_requests_usd']:>10.4f}{xfer_txt:>12}"
        f"   ({time.perf_counter() - t:.1f} s)"
    )
    return ttft.quantile(0.99), tpot.quantile(0.99), good, s


if __name__ == "__main__":
    main()
