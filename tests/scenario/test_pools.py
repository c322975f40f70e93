"""A heterogeneous cluster of two pools (2 x H100 + 1 x A100 40 GB): routing across the pools,
each replica's step times from its own pool's grids, each pool's KV blocks, per-pool figures;
one pool given as cluster.pools runs exactly as the plain single-pool config."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from vidur_fast.kernels.dtypes import NS_PER_MS
from vidur_fast.kernels.timing import stage_time_ms_nb

from vidur_fast.api import simulate
from vidur_fast.catalog import get_model
from vidur_fast.config.convert import build_dataclass, config_dict
from vidur_fast.config.sim import SarathiScheduler, SimConfig
from vidur_fast.outputs.console import format_summary
from vidur_fast.timing.build import build_timing

PREDICTOR = {"source": "roofline", "max_tokens": 8192, "max_prefill_chunk": 4096}
PROMPT = 700


def _cfg(cluster: dict, n: int = 6, intervals="StaticIntervals") -> SimConfig:
    return build_dataclass(
        SimConfig,
        {
            "cluster": cluster,
            "predictor": PREDICTOR,
            "router": "round_robin",
            "quiet": True,
            "workload": {
                "type": "synthetic",
                "num_requests": n,
                "lengths": {"type": "FixedLengths", "prefill_tokens": PROMPT, "decode_tokens": 3},
                "intervals": intervals,
                "ingest_ms": 0.0,
            },
        },
        "",
    )


HETERO = {
    "pools": [
        {"device": "h100", "num_replicas": 2},
        {"device": "a100_40gb", "num_replicas": 1},
    ]
}


@pytest.fixture(scope="module")
def hetero():
    return simulate(_cfg(HETERO))


def test_round_robin_spans_the_pools(hetero):
    assert hetero.requests["replica"].tolist() == [0, 1, 2, 0, 1, 2]
    assert hetero.replicas["pool"].tolist() == [0, 0, 1]
    assert hetero.replicas["requests_completed"].tolist() == [2, 2, 2]


def test_each_replica_steps_on_its_own_pools_grids(hetero):
    """The first step of each replica is the prefill of its first request alone (all arrive
    at 0): its duration is the stage time of that batch on the replica's pool's grids."""
    cfg = hetero.config  # engine defaults resolved
    model = get_model(cfg.cluster.model)
    want = {}
    for pool, device in enumerate(("h100", "a100_40gb")):
        t = build_timing(model, device, None, 1, 1, cfg.predictor)
        ms = stage_time_ms_nb(
            t.grids._replace(counters=np.zeros_like(t.grids.counters)),
            t.params,
            PROMPT,
            0,
            0,
            1,
            0,
            PROMPT * PROMPT,
            True,
        )
        want[pool] = int(round(ms * NS_PER_MS))
    assert want[0] != want[1]
    b = hetero.batch_log.frame_ns()
    for r, pool in enumerate((0, 0, 1)):
        first = b[b["replica"] == r].iloc[0]
        assert first["num_prefill_tokens"] == PROMPT and first["batch_size"] == 1
        assert first["end_ns"] - first["start_ns"] == want[pool], r


def test_each_pool_has_its_own_kv_blocks(hetero):
    blocks = hetero.replicas["num_blocks"].tolist()
    assert blocks[0] == blocks[1] > blocks[2] > 0  # 80 GB vs 40 GB


def test_pool_figures_and_cost(hetero):
    s = hetero.summary
    pools = s["pools"]
    assert [p["device"] for p in pools] == ["h100", "a100_40gb"]
    assert [p["replicas"] for p in pools] == [2, 1]
    assert [p["num_completed"] for p in pools] == [4, 2]
    assert s["gpus"] == 3
    assert s["cost_usd"] == pytest.approx(sum(p["cost_usd"] for p in pools))
    assert pools[0]["price_per_gpu_hour_usd"] != pools[1]["price_per_gpu_hour_usd"]
    for p in pools:
        assert 0 < p["busy_fraction_mean"] <= 1
        assert p["scheduling_delay_p50_s"] is not None
    text = format_summary(s)
    assert "pool 0: 2 x h100" in text and "pool 1: 1 x a100_40gb" in text
    json.dumps(s)  # summary.json can hold it


def test_config_round_trip_keeps_pools(hetero):
    data = json.loads(json.dumps(config_dict(hetero.config)))
    assert build_dataclass(SimConfig, data, "") == hetero.config


def test_one_pool_list_equals_the_single_pool_config():
    poisson = {"type": "PoissonIntervals", "qps": 40.0}
    plain = simulate(_cfg({"device": "h100", "num_replicas": 2}, n=40, intervals=poisson))
    pooled = simulate(
        _cfg({"pools": [{"device": "h100", "num_replicas": 2}]}, n=40, intervals=poisson)
    )
    pd.testing.assert_frame_equal(plain.requests, pooled.requests)
    pd.testing.assert_frame_equal(plain.replicas, pooled.replicas)
    assert plain.summary["cost_usd"] == pytest.approx(pooled.summary["cost_usd"])


def test_the_example_file_reads():
    from tests.conftest import REPO
    from vidur_fast.config.files import load_config

    cfg = load_config(str(REPO / "docs" / "examples" / "pools_h100_a100.yaml"))
    assert [(p.device, p.tp, p.num_replicas) for p in cfg.cluster.pools] == [
        ("h100", 1, 4),
        ("a100", 2, 2),
    ]


def _router_names():
    from vidur_fast.config.convert import field_types, union_members

    return list(union_members(field_types(SimConfig)["router"]))


@pytest.mark.parametrize("router", _router_names())
def test_every_router_serves_a_heterogeneous_cluster(router):
    """Each router on 2 x h100 + 1 x a100_40gb, on a trace with sessions and shared prefixes
    (what the session and cache-aware routers need): every request completes."""
    from tests.conftest import REPO

    trace = str(REPO / "traces" / "examples" / "multiturn_shared_prefix.csv")
    cfg = build_dataclass(
        SimConfig,
        {
            "cluster": HETERO,
            "predictor": PREDICTOR,
            "router": router,
            "quiet": True,
            "workload": {"type": "trace", "path": trace},
        },
        "",
    )
    r = simulate(cfg)
    assert r.summary["num_completed"] == r.summary["num_requests"] - r.summary["num_rejected"]
    assert sum(p["num_completed"] for p in r.summary["pools"]) == r.summary["num_completed"]
    assert r.requests["replica"].max() <= 2


def test_sarathi_pools_with_their_own_pipeline_depths():
    cluster = {"pools": [{"device": "h100", "pp": 2}, {"device": "a100", "num_replicas": 2}]}
    cfg = dataclasses.replace(
        _cfg(cluster, n=30, intervals={"type": "PoissonIntervals", "qps": 50.0}),
        scheduler=SarathiScheduler(),
    )
    r = simulate(cfg)
    assert r.summary["num_completed"] == 30
    assert r.replicas["pool"].tolist() == [0, 1, 1]
    b = r.batch_log.frame_ns()
    # with pp 2 the first stage ends before the batch does; with pp 1 it is the whole batch
    a100 = b[b["replica"] > 0]
    assert (a100["end_ns"] - a100["start_ns"] >= a100["stage_ns"]).all()
    assert (
        b[b["replica"] == 0]["stage_ns"] < (b["end_ns"] - b["start_ns"])[b["replica"] == 0]
    ).all()


def test_closed_loop_on_pools():
    cfg = build_dataclass(
        SimConfig,
        {
            "cluster": HETERO,
            "predictor": PREDICTOR,
            "router": "lor",
            "quiet": True,
            "workload": {"type": "closed_loop", "concurrency": 6, "num_requests": 40},
        },
        "",
    )
    r = simulate(cfg)
    assert r.summary["num_completed"] == 40
    assert set(r.requests["replica"]) == {0, 1, 2}


def test_same_config_same_outputs(hetero):
    again = simulate(_cfg(HETERO))
    pd.testing.assert_frame_equal(hetero.requests, again.requests)
    pd.testing.assert_frame_equal(hetero.batch_log.frame_ns(), again.batch_log.frame_ns())


def test_trace_draws_each_replica_with_its_pools_stages(tmp_path):
    from vidur_fast.outputs.writer import write_run

    cluster = {"pools": [{"device": "h100", "pp": 2}, {"device": "a100", "num_replicas": 2}]}
    cfg = _cfg(cluster, n=20, intervals={"type": "PoissonIntervals", "qps": 50.0})
    cfg = dataclasses.replace(cfg, scheduler=SarathiScheduler())
    r = simulate(cfg)
    run_dir = tmp_path / "run"
    out = dataclasses.replace(r.config.output, dir=str(run_dir), write_trace=True)
    write_run(r, out)
    events = json.loads((run_dir / "trace.json").read_text())["traceEvents"]
    # one process per pool, named by its layout; one thread per replica and stage
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {0: "pool 0: mixed 1 x h100 tp1 pp2", 1: "pool 1: mixed 2 x a100 tp1"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"
    }
    assert threads == {
        (0, 0): "replica 0 stage 0",
        (0, 1): "replica 0 stage 1",
        (1, 2): "replica 1 stage 0",
        (1, 3): "replica 2 stage 0",
    }
    stages = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "X"}
    assert stages == set(threads)
    # each replica's batches on its own thread: as many spans there as it ran batches (x stages)
    per_thread = {k: 0 for k in threads}
    for e in events:
        if e.get("ph") == "X":
            per_thread[(e["pid"], e["tid"])] += 1
    batches = r.replicas.set_index("replica")["batches"]
    assert per_thread[(0, 0)] == per_thread[(0, 1)] == batches[0]
    assert per_thread[(1, 2)] == batches[1] and per_thread[(1, 3)] == batches[2]
    counters = {(e["pid"], e["name"]) for e in events if e.get("ph") == "C"}
    assert (1, "replica 2 kv_use_pct") in counters and (0, "replica 0 waiting_requests") in counters


def test_a_pool_with_its_own_scheduler_limits():
    """The A100 pool runs at most 2 requests at once and 256 tokens a step; the H100 pool has
    the cluster's settings."""
    small = {"type": "vllm_v1", "max_num_seqs": 2, "max_num_batched_tokens": 256}
    cluster = {
        "pools": [
            {"device": "h100", "num_replicas": 1},
            {"device": "a100", "num_replicas": 1, "scheduler": small},
        ]
    }
    cfg = _cfg(cluster, n=40, intervals={"type": "PoissonIntervals", "qps": 200.0})
    r = simulate(cfg)
    assert r.summary["num_completed"] == 40
    b = r.batch_log.frame_ns()
    a100, h100 = b[b["replica"] == 1], b[b["replica"] == 0]
    assert a100["batch_size"].max() <= 2 and a100["num_tokens"].max() <= 256
    assert h100["batch_size"].max() > 2 and h100["num_tokens"].max() > 256
