"""Prefill/decode disaggregation (1P1D, vllm_v1): the hand-off's exact timing (with and
without async scheduling), the decode side's KV reservation queue, prefix caching on both
pools, determinism, and refusals of what the flow does not model."""

import json

import numpy as np
import pytest
from vidur_fast.kernels.dtypes import NS_PER_MS
from vidur_fast.kernels.timing import host_time_ms_nb, stage_time_ms_nb

from tests.helpers.cli import assert_one_error, run_cli
from tests.helpers.cli_args import FAST_TIMING_ARGS
from tests.reference.naive_sim import place_nodes
from vidur_fast.api import simulate
from vidur_fast.catalog import get_model, get_node
from vidur_fast.config.convert import build_dataclass
from vidur_fast.config.sim import SimConfig
from vidur_fast.params.memory import kv_bytes_per_token
from vidur_fast.timing.build import build_timing

PREDICTOR = {"source": "roofline", "max_tokens": 8192, "max_prefill_chunk": 4096}
SCHED = {"type": "vllm_v1", "enable_prefix_caching": False, "async_scheduling": False}
PROMPT = 700


def _pools(decode_blocks=None, n_decode=1):
    dec = {"device": "h100", "num_replicas": n_decode, "role": "decode"}
    if decode_blocks is not None:
        dec["scheduler"] = {**SCHED, "num_blocks": decode_blocks}
    return [{"device": "h100", "num_replicas": 1, "role": "prefill"}, dec]


def _cfg(
    pools, n=1, decode=2, router="lor", intervals="StaticIntervals", sched=SCHED, **cluster
) -> SimConfig:
    return build_dataclass(
        SimConfig,
        {
            "cluster": {"pools": pools, **cluster},
            "predictor": PREDICTOR,
            "scheduler": sched,
            "router": router,
            "quiet": True,
            "workload": {
                "type": "synthetic",
                "num_requests": n,
                "lengths": {
                    "type": "FixedLengths",
                    "prefill_tokens": PROMPT,
                    "decode_tokens": decode,
                },
                "intervals": intervals,
                "ingest_ms": 0.0,
            },
        },
        "",
    )


def _same_prompt_cfg(pools, sched, n=2, think_s=0.2, **cluster) -> SimConfig:
    """n requests of one client, each sent think_s after the previous one completes, all with
    the same PROMPT-token prompt (a prompt pool of one entry: its full blocks share hashes)."""
    return build_dataclass(
        SimConfig,
        {
            "cluster": {"pools": pools, **cluster},
            "predictor": PREDICTOR,
            "scheduler": sched,
            "router": "lor",
            "quiet": True,
            "workload": {
                "type": "closed_loop",
                "concurrency": 1,
                "num_requests": n,
                "think_time_s": think_s,
                "prompt_pool": 1,
                "lengths": {"type": "FixedLengths", "prefill_tokens": PROMPT, "decode_tokens": 2},
                "ingest_ms": 0.0,
            },
        },
        "",
    )


def _timing(cfg):
    model = get_model(cfg.cluster.model)
    t = build_timing(model, "h100", None, 1, 1, cfg.predictor)
    return t.grids._replace(counters=np.zeros_like(t.grids.counters)), t.params


def _step_ns(cfg, n_tok, n_dec, dec_kv, n_pre, pre_kv, pre_sq):
    grids, params = _timing(cfg)
    ms = stage_time_ms_nb(grids, params, n_tok, n_dec, dec_kv, n_pre, pre_kv, pre_sq, True)
    return int(round(ms * NS_PER_MS))


@pytest.mark.parametrize("placement", ["packed", "separate_nodes"])
@pytest.mark.parametrize("async_on", [False, True], ids=["sync", "async"])
def test_single_request_first_and_second_token_to_the_ns(async_on, placement):
    """Idle 1P1D: the prefill step's token is discarded; the first token comes after the
    transfer (latency + bytes / bandwidth) and the decode side's first step (one token, the
    last prompt token recomputed), the second one decode step later. With async scheduling
    the second step is formed while the first runs: its host part overlaps the first step,
    so it ends its stage time less its host time after the first. Packed, the two TP1
    replicas share one H100 node and the KV moves over NVLink (450 GB/s); on separate nodes
    over the network (50 GB/s); 3 us of latency either way."""
    cfg = _cfg(
        _pools(),
        sched={**SCHED, "async_scheduling": async_on},
        kv_transfer={"placement": placement},
    )
    res = simulate(cfg)
    cfg = res.config
    b = res.batch_log.frame_ns()
    assert b["replica"].tolist() == [0, 1, 1]
    pre, dec, dec2 = b.iloc[0], b.iloc[1], b.iloc[2]
    assert int(pre["start_ns"]) == 0
    prefill_ns = _step_ns(cfg, PROMPT, 0, 0, 1, 0, PROMPT * PROMPT)
    assert int(pre["end_ns"]) == prefill_ns
    node = get_node("h100_dgx")
    nbytes = PROMPT * kv_bytes_per_token(get_model(cfg.cluster.model), 1, 32)
    bw = node.nvlink_bandwidth_gbps if placement == "packed" else node.inter_node_bandwidth_gbps
    assert bw == (450.0 if placement == "packed" else 50.0) and node.p2p_latency_us == 3.0
    xfer_ns = 3000 + int(round(nbytes / bw))
    assert int(dec["start_ns"]) == prefill_ns + xfer_ns
    assert int(dec["num_tokens"]) == 1 and int(dec["num_decode_tokens"]) == 1
    # the recomputed last prompt token attends to the PROMPT - 1 tokens before it
    first_ns = _step_ns(cfg, 1, 1, PROMPT - 1, 0, 0, 0)
    assert int(dec["end_ns"]) - int(dec["start_ns"]) == first_ns
    second_ns = _step_ns(cfg, 1, 1, PROMPT, 0, 0, 0)
    if async_on:
        second_ns -= int(round(host_time_ms_nb(_timing(cfg)[1], 1) * NS_PER_MS))
        assert int(dec2["start_ns"]) == int(dec["end_ns"])
    assert int(dec2["end_ns"]) - int(dec2["start_ns"]) == second_ns
    r = res.requests.iloc[0]
    ttft_ns = prefill_ns + xfer_ns + first_ns
    assert round(r["prefill_completed_at"] * 1e9) == ttft_ns
    assert round(r["prefill_end_at"] * 1e9) == prefill_ns
    assert round(r["completed_at"] * 1e9) == ttft_ns + second_ns
    assert round(r["tbt_max"] * 1e9) == second_ns
    tpot = r["decode_time_execution_plus_preemption_normalized"]
    assert round(tpot * 2e9) == second_ns
    assert r["replica"] == 1 and r["prefill_replica"] == 0
    assert round(r["kv_transfer_start_at"] * 1e9) == prefill_ns
    assert round(r["kv_transfer_end_at"] * 1e9) == prefill_ns + xfer_ns
    assert r["kv_transfer_bytes"] == nbytes and not r["waited_for_decode_kv"]
    pd = res.summary["pd"]
    assert pd["num_transfers"] == 1 and pd["bytes_moved"] == nbytes
    kind = "nvlink" if placement == "packed" else "network"
    other = "network" if placement == "packed" else "nvlink"
    assert pd["by_link"][kind] == {"num_transfers": 1, "bytes_moved": nbytes}
    assert pd["by_link"][other] == {"num_transfers": 0, "bytes_moved": 0}
    assert pd["num_nodes"] == (1 if placement == "packed" else 2)
    assert res.replicas["node"].tolist() == ([0, 0] if placement == "packed" else [0, 1])
    assert [x["link"] for x in pd["links"]] == (
        ["network", "nvlink"] if placement == "packed" else ["network"]
    )
    assert round(pd["transfer_time_p50_s"] * 1e9) == xfer_ns
    assert pd["num_waited_for_decode_kv"] == 0
    assert round(pd["prefill_end_to_first_token_mean_s"] * 1e9) == xfer_ns + first_ns
    roles = [p["role"] for p in res.summary["pools"]]
    assert roles == ["prefill", "decode"]
    assert [p["num_completed"] for p in res.summary["pools"]] == [0, 1]
    # queueing counts where the request queued: the prefill pool
    assert res.summary["pools"][0]["scheduling_delay_p50_s"] == 0.0
    assert res.summary["pools"][1]["scheduling_delay_p50_s"] is None


@pytest.mark.parametrize(
    "link",
    [
        {"bandwidth_gbps": 10.0, "latency_us": 0.0, "placement": "separate_nodes"},
        {"intra_node_bandwidth_gbps": 10.0, "intra_node_latency_us": 0.0},
    ],
    ids=["network", "nvlink"],
)
def test_kv_transfer_override(link):
    """The network figures override the link between nodes, the intra-node ones NVLink."""
    res = simulate(_cfg(_pools(), kv_transfer=link))
    nbytes = res.summary["pd"]["bytes_moved"]
    assert round(res.summary["pd"]["transfer_time_p50_s"] * 1e9) == round(nbytes / 10.0)


def test_packed_placement_puts_pairs_on_nodes():
    """8-GPU H100 nodes: four TP2 replicas (2P2D) fill one node, every transfer over NVLink;
    four TP4 replicas take two nodes, the prefill pair on the first, every transfer over the
    network; a TP16 replica takes two whole nodes of its own."""

    def run(tp, n_decode=2):
        pools = [
            {"device": "h100", "tp": tp, "num_replicas": 2, "role": "prefill"},
            {"device": "h100", "tp": tp, "num_replicas": n_decode, "role": "decode"},
        ]
        return simulate(_cfg(pools, n=4, router="round_robin"))

    two = run(2)
    assert two.replicas["node"].tolist() == [0, 0, 0, 0]
    assert two.summary["pd"]["num_nodes"] == 1
    assert two.summary["pd"]["by_link"]["nvlink"]["num_transfers"] == 4
    four = run(4)
    assert four.replicas["node"].tolist() == [0, 0, 1, 1]
    assert four.summary["pd"]["num_nodes"] == 2
    assert four.summary["pd"]["by_link"]["network"]["num_transfers"] == 4
    assert four.summary["pd"]["by_link"]["nvlink"]["num_transfers"] == 0


def test_place_replicas_rule():
    """Pools in order, replicas in order; a replica stays on one node when it fits; a replica
    larger than a node takes whole nodes of its own; node types do not share a node."""
    from types import SimpleNamespace as NS

    from vidur_fast.api import place_replicas

    def pool(node, gpus, tp, n):
        c = NS(tp=tp, pp=1, num_replicas=n)
        return NS(cfg=NS(cluster=c), node=NS(name=node, gpus_per_node=gpus))

    pools = [pool("a", 8, 3, 3), pool("a", 8, 16, 1), pool("a", 8, 2, 1), pool("b", 8, 1, 1)]
    assert place_replicas(pools) == ([0, 0, 1, 2, 4, 5], 6)
    assert place_replicas(pools, "separate_nodes") == ([0, 1, 2, 3, 5, 6], 7)
    # the reference simulator's rule, written apart, agrees on drawn clusters
    rng = np.random.default_rng(3)
    for _ in range(200):
        drawn = [
            pool(str(rng.choice(["a", "b"])), 8, int(rng.choice([1, 2, 3, 4, 8, 16])), 1 + k % 3)
            for k in range(int(rng.integers(1, 5)))
        ]
        gpus = [q.cfg.cluster.tp for q in drawn for _ in range(q.cfg.cluster.num_replicas)]
        kinds = [q.node.name for q in drawn for _ in range(q.cfg.cluster.num_replicas)]
        for packed in (True, False):
            want = place_nodes(gpus, [8] * len(gpus), kinds, packed)
            got = place_replicas(drawn, "packed" if packed else "separate_nodes")
            assert got == want


@pytest.mark.parametrize("contention", ["none", "fair_share"])
def test_two_transfers_overlap_on_the_prefill_link_to_the_ns(contention):
    """Two 700-token prompts 10 ms apart over a 1 GB/s link (1 byte per ns) with 5 us of
    latency: B = 91,750,400 bytes each. The first transfer starts at the first prefill's end
    t0, the second at the second prefill's end t1, while the first still sends. Without
    contention each ends at its start + 5,000 + B. With fair share the first has sent
    t1 - t0 bytes alone, then both send at half the bandwidth: its R = B - (t1 - t0) bytes
    left take 2R, so it ends at t1 + 2R + 5,000; the second has B - R left at full bandwidth
    and ends at t1 + 2R + (B - R) + 5,000 = t1 + B + R + 5,000."""
    link = {
        "bandwidth_gbps": 1.0,
        "latency_us": 5.0,
        "contention": contention,
        "placement": "separate_nodes",
    }
    res = simulate(
        _cfg(_pools(), n=2, intervals={"type": "UniformIntervals", "qps": 100.0}, kv_transfer=link)
    )
    b = res.batch_log.frame_ns()
    pre = b[b["replica"] == 0]
    assert len(pre) == 2
    t0, t1 = (int(x) for x in pre["end_ns"])
    nbytes = PROMPT * kv_bytes_per_token(get_model(res.config.cluster.model), 1, 32)
    assert nbytes == 91_750_400 and 0 < t1 - t0 < nbytes
    r = res.requests
    start = [round(x * 1e9) for x in r["kv_transfer_start_at"]]
    end = [round(x * 1e9) for x in r["kv_transfer_end_at"]]
    assert start == [t0, t1]
    if contention == "none":
        assert end == [t0 + nbytes + 5000, t1 + nbytes + 5000]
    else:
        left = nbytes - (t1 - t0)
        assert end == [t1 + 2 * left + 5000, t1 + nbytes + left + 5000]
        assert res.summary["pd"]["contention"] == "fair_share"
    # the decode side runs each request's first step when its transfer ends
    dec = b[b["replica"] == 1]
    assert int(dec["start_ns"].iloc[0]) == end[0]
    assert r["completed"].all()


def test_fair_share_alone_on_the_link_equals_no_contention():
    """A transfer alone on its link takes latency + bytes / bandwidth under either model."""
    a = simulate(_cfg(_pools()))
    b = simulate(_cfg(_pools(), kv_transfer={"contention": "fair_share"}))
    assert a.requests.equals(b.requests)
    assert a.batch_log.frame_ns().equals(b.batch_log.frame_ns())


def test_decode_kv_reservation_queues_until_blocks_free():
    """Two prompts of 44 blocks each, a decode replica with 59: the second hand-off waits
    until the first request completes there and frees its blocks."""
    res = simulate(_cfg(_pools(decode_blocks=60), n=2, decode=10))
    req = res.requests
    assert req["completed"].all()
    pd = res.summary["pd"]
    assert pd["num_handoffs"] == 2 and pd["num_waited_for_decode_kv"] == 1
    # the second prefill ends while the first request decodes; its transfer starts when the
    # first request completes
    first_done = req["completed_at"].iloc[0]
    assert req["prefill_end_at"].iloc[1] < first_done
    wait = 2 * pd["decode_kv_wait_mean_s"]
    assert wait == pytest.approx(first_done - req["prefill_end_at"].iloc[1], abs=1e-9)
    # the second request's first token comes after its wait, transfer and first step
    assert req["prefill_completed_at"].iloc[1] > req["kv_transfer_end_at"].iloc[1]
    assert req["completed_at"].iloc[1] > first_done
    assert req["waited_for_decode_kv"].tolist() == [False, True]
    assert req["kv_transfer_start_at"].iloc[1] == pytest.approx(first_done, abs=1e-9)


def test_two_decode_replicas_share_the_load_and_runs_repeat():
    a = simulate(_cfg(_pools(n_decode=2), n=8, decode=5, router="round_robin"))
    b = simulate(_cfg(_pools(n_decode=2), n=8, decode=5, router="round_robin"))
    assert a.requests["replica"].tolist() == [1, 2] * 4
    assert a.requests.equals(b.requests)
    assert json.dumps(a.summary["pd"]) == json.dumps(b.summary["pd"])


@pytest.mark.parametrize("above, replica", [(PROMPT - 1, 1), (PROMPT, 2)])
def test_decider_sends_short_prompts_to_the_mixed_pool(above, replica):
    """uncached_tokens_above N: prompts longer than N go disaggregated (decode replica 1),
    the others to the mixed replica 2, which serves them whole."""
    pools = [*_pools(), {"device": "h100", "num_replicas": 1, "role": "mixed"}]
    cfg = _cfg(
        pools, n=3, decode=4, pd_decider="uncached_tokens_above", pd_uncached_tokens_above=above
    )
    res = simulate(cfg)
    assert res.requests["replica"].tolist() == [replica] * 3
    assert res.requests["completed"].all()
    assert res.summary["pd"]["num_handoffs"] == (3 if replica == 1 else 0)
    done = [p["num_completed"] for p in res.summary["pools"]]
    assert done == ([0, 3, 0] if replica == 1 else [0, 0, 3])


CACHING = {**SCHED, "enable_prefix_caching": True}


@pytest.mark.parametrize("async_on", [False, True], ids=["sync", "async"])
def test_prefix_cache_second_request_moves_fewer_bytes_and_prefills_less(async_on):
    """Two requests with the same 700-token prompt, one after the other, on 1P1D with prefix
    caching: the second hits the prefill replica's cache (43 full blocks of 16 tokens: 688
    tokens) and prefills 12 tokens; its decode replica holds the first request's 43 received
    blocks in its cache, so only the 12 other tokens' KV moves (one new block), and its first
    token still comes at prefill end + transfer + the decode side's first step."""
    sched = {**CACHING, "async_scheduling": async_on}
    res = simulate(_same_prompt_cfg(_pools(), sched))
    cfg = res.config
    r = res.requests
    assert r["completed"].all() and r["replica"].tolist() == [1, 1]
    tok = kv_bytes_per_token(get_model(cfg.cluster.model), 1, 32)
    assert r["kv_transfer_bytes"].tolist() == [PROMPT * tok, 12 * tok]
    assert r["request_num_prefill_tokens_cached"].tolist() == [0, 688]
    b = res.batch_log.frame_ns()
    pre = b[b["replica"] == 0]
    assert pre["num_prefill_tokens"].tolist() == [PROMPT, 12]
    assert pre["num_cached_tokens"].tolist() == [0, 688]
    node = get_node("h100_dgx")  # both replicas on one node: NVLink
    lat = int(round(node.p2p_latency_us * 1000))
    xfer = [lat + int(round(k * tok / node.nvlink_bandwidth_gbps)) for k in (PROMPT, 12)]
    start = [round(x * 1e9) for x in r["kv_transfer_start_at"]]
    end = [round(x * 1e9) for x in r["kv_transfer_end_at"]]
    assert [e - s for s, e in zip(start, end, strict=True)] == xfer
    assert [round(x * 1e9) for x in r["prefill_end_at"]] == start
    first_ns = _step_ns(cfg, 1, 1, PROMPT - 1, 0, 0, 0)
    assert [round(x * 1e9) for x in r["prefill_completed_at"]] == [e + first_ns for e in end]
    pd = res.summary["pd"]
    assert pd["bytes_moved"] == (PROMPT + 12) * tok and pd["num_transfers"] == 2
    # each replica looked the prompt up twice (admission; reservation) and found it the second
    # time: the prefill replica from the first request's prefill, the decode replica from the
    # blocks it received for the first request
    reps = res.replicas
    assert reps["prefix_cache_query_tokens"].tolist() == [2 * PROMPT, 2 * PROMPT]
    assert reps["prefix_cache_hit_tokens"].tolist() == [688, 688]


def test_prefix_cache_decider_counts_tokens_cached_on_the_prefill_replica():
    """uncached_tokens_above 100 with prefix caching: the first prompt (700 tokens, nothing
    cached) goes disaggregated; the second, the same prompt, has 12 tokens outside the prefill
    replica's cache and goes to the mixed replica."""
    pools = [*_pools(), {"device": "h100", "num_replicas": 1, "role": "mixed"}]
    cfg = _same_prompt_cfg(
        pools, CACHING, pd_decider="uncached_tokens_above", pd_uncached_tokens_above=100
    )
    res = simulate(cfg)
    assert res.requests["replica"].tolist() == [1, 2]
    assert res.requests["prefill_replica"].tolist() == [0, -1]
    assert res.summary["pd"]["num_handoffs"] == 1


def _pd_file(d, pools, scheduler=SCHED, **cluster) -> str:
    path = d / "pd.json"
    body = {"cluster": {"pools": pools, **cluster}, "scheduler": scheduler}
    path.write_text(json.dumps(body))
    return str(path)


BAD = {
    "no_decode_pool": (
        [{"role": "prefill"}, {"role": "prefill"}],
        {},
        SCHED,
        "cluster.pools: a disaggregated cluster needs a decode pool",
    ),
    "no_prefill_pool": ([{"role": "decode"}], {}, SCHED, "needs a prefill pool"),
    "mixed_beside_pd": (
        [{"role": "prefill"}, {"role": "decode"}, {"role": "mixed"}],
        {},
        SCHED,
        "cluster.pools[2].role",
    ),
    "pool_with_own_model": (
        [{"role": "prefill"}, {"role": "decode", "model": "Qwen/Qwen3-8B"}],
        {},
        SCHED,
        "cluster.pools[1].model",
    ),
    "bandwidth_zero": (
        _pools(),
        {"kv_transfer": {"bandwidth_gbps": 0}},
        SCHED,
        "cluster.kv_transfer.bandwidth_gbps",
    ),
    "latency_negative": (
        _pools(),
        {"kv_transfer": {"latency_us": -1}},
        SCHED,
        "cluster.kv_transfer.latency_us",
    ),
    "intra_bandwidth_zero": (
        _pools(),
        {"kv_transfer": {"intra_node_bandwidth_gbps": 0}},
        SCHED,
        "cluster.kv_transfer.intra_node_bandwidth_gbps",
    ),
    "intra_latency_negative": (
        _pools(),
        {"kv_transfer": {"intra_node_latency_us": -1}},
        SCHED,
        "cluster.kv_transfer.intra_node_latency_us",
    ),
    "placement_unknown": (
        _pools(),
        {"kv_transfer": {"placement": "spread"}},
        SCHED,
        "cluster.kv_transfer.placement",
    ),
    "contention_unknown": (
        _pools(),
        {"kv_transfer": {"contention": "max_min"}},
        SCHED,
        "cluster.kv_transfer.contention",
    ),
    "decider_never_without_mixed": (
        _pools(),
        {"pd_decider": "never"},
        SCHED,
        "cluster.pd_decider: never sends requests to mixed pools",
    ),
    "threshold_negative": (
        [*_pools(), {"role": "mixed"}],
        {"pd_decider": "uncached_tokens_above", "pd_uncached_tokens_above": -1},
        SCHED,
        "cluster.pd_uncached_tokens_above",
    ),
    "threshold_without_its_decider": (
        [*_pools(), {"role": "mixed"}],
        {"pd_decider": "never", "pd_uncached_tokens_above": 5},
        SCHED,
        "cluster.pd_uncached_tokens_above",
    ),
    "decider_unknown": (_pools(), {"pd_decider": "sometimes"}, SCHED, "cluster.pd_decider"),
    "decider_without_pd": ([{"role": "mixed"}], {"pd_decider": "never"}, SCHED, "pd_decider"),
    "other_scheduler": (_pools(), {}, {"type": "sarathi"}, "scheduler: prefill/decode"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_pd_input_one_line_exit_2(case, tmp_path, capsys):
    pools, cluster, sched, needle = BAD[case]
    path = _pd_file(tmp_path, pools, sched, **cluster)
    out = tmp_path / "out"
    code, lines = run_cli(
        ["--quiet", *FAST_TIMING_ARGS, "--output.dir", str(out), "--config", path], capsys
    )
    assert_one_error(code, lines, needle)
    assert not out.exists()


SPACED = {"type": "UniformIntervals", "qps": 2.0}  # a request every 0.5 s
ROUTED = {  # (prefill pool's router, decode pool's router, arrivals, prefill and decode replicas)
    "cluster_round_robin": (None, None, SPACED, [0, 1, 0, 1], [2, 3, 2, 3]),
    "prefill_pool_lop": ("lop", None, SPACED, [0, 0, 0, 0], [2, 3, 2, 3]),
    "decode_pool_least_waiting_spaced": (None, "least_waiting", SPACED, [0, 1, 0, 1], [2] * 4),
    "decode_pool_least_waiting_at_once": (
        None,
        "least_waiting",
        "StaticIntervals",
        [0, 1, 0, 1],
        [2, 3, 2, 3],
    ),
}


@pytest.mark.parametrize("case", list(ROUTED))
def test_pool_router_picks_inside_its_pool(case):
    """2P2D, cluster router round_robin. A request every 0.5 s: a prefill pool routed by lop
    sends every request to its first replica (each prefill has ended before the next
    arrival, so both loads are 0 again), and a decode pool routed by least_waiting every
    hand-off to its first replica (each has had its first decode step, so none waits). All
    four at once: the two prefill replicas hand off requests 0 and 1 at one time, then 2
    and 3; least_waiting counts a hand-off not yet past its first decode step as waiting, so
    the second of each pair goes to the other decode replica. The pools without a router of
    their own stay round robin."""
    pre_router, dec_router, intervals, want_pre, want_dec = ROUTED[case]
    pools = [
        {"device": "h100", "num_replicas": 2, "role": "prefill", "router": pre_router},
        {"device": "h100", "num_replicas": 2, "role": "decode", "router": dec_router},
    ]
    res = simulate(_cfg(pools, n=4, decode=30, router="round_robin", intervals=intervals))
    assert res.requests["prefill_replica"].tolist() == want_pre
    assert res.requests["replica"].tolist() == want_dec
    assert res.requests["completed"].all()


def _router_names():
    from vidur_fast.config.convert import field_types, union_members

    return list(union_members(field_types(SimConfig)["router"]))


@pytest.mark.parametrize("router", _router_names())
def test_every_router_serves_a_pd_cluster_and_repeats(router):
    """2P (two pools, one with a router of its own) + 2D + a mixed pool, on a trace with
    sessions and shared prefixes, vllm_v1's defaults (prefix caching and async scheduling
    on): every router as the cluster's and as the decode pool's completes every request, the
    same way twice."""
    from tests.conftest import REPO

    trace = str(REPO / "traces" / "examples" / "multiturn_shared_prefix.csv")
    pools = [
        {"device": "h100", "num_replicas": 1, "role": "prefill"},
        {"device": "h100", "num_replicas": 2, "role": "prefill", "router": "lor"},
        {"device": "h100", "num_replicas": 2, "role": "decode", "router": router},
        {"device": "h100", "num_replicas": 1, "role": "mixed"},
    ]
    cfg = _cfg(
        pools,
        router=router,
        sched={"type": "vllm_v1"},
        pd_decider="uncached_tokens_above",
        pd_uncached_tokens_above=500,
    )
    cfg = build_dataclass(SimConfig, {"workload": {"type": "trace", "path": trace}}, "", cfg)
    a, b = simulate(cfg), simulate(cfg)
    req = a.requests
    assert a.summary["num_completed"] == a.summary["num_requests"] - a.summary["num_rejected"]
    assert set(req["prefill_replica"]) <= {-1, 0, 1, 2}
    assert set(req["replica"][req["prefill_replica"] >= 0]) <= {3, 4}
    assert set(req["replica"][req["prefill_replica"] < 0]) <= {5}
    assert (req["prefill_replica"] >= 0).any() and (req["prefill_replica"] < 0).any()
    assert a.requests.equals(b.requests)


BAD_ROUTERS = {
    "unknown": ({"router": "fastest"}, "cluster.pools[1].router: unknown type 'fastest'"),
    "top_k_zero": (
        {"router": {"type": "ranked_sticky_lop_uncached", "top_k": 0}},
        "cluster.pools[1].router.top_k",
    ),
    "prefix_aware": ({"router": "prefix_aware"}, "cluster.pools[1].router: prefix_aware needs"),
    "sessions": ({"router": "sticky_lor"}, "cluster.pools[1].router: sticky_lor needs session"),
}


@pytest.mark.parametrize("case", list(BAD_ROUTERS))
def test_bad_pool_router_one_line_exit_2(case, tmp_path, capsys):
    extra, needle = BAD_ROUTERS[case]
    pools = _pools()
    pools[1] = {**pools[1], **extra}
    path = _pd_file(tmp_path, pools)
    out = tmp_path / "out"
    code, lines = run_cli(
        ["--quiet", *FAST_TIMING_ARGS, "--output.dir", str(out), "--config", path], capsys
    )
    assert_one_error(code, lines, needle)
    assert not out.exists()


def test_pool_router_without_pools_one_line_exit_2(tmp_path, capsys):
    """A router belongs to a pool: a config without cluster.pools has no cluster.router."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"cluster": {"router": "lor"}}))
    code, lines = run_cli(["--quiet", *FAST_TIMING_ARGS, "--config", str(path)], capsys)
    assert_one_error(code, lines, "cluster.router: unknown field of ClusterConfig")
