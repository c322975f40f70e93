"""Small simulated runs shared by the output and report tests (registered as a pytest
plugin in tests/conftest.py, so each session fixture runs once). Imports are lazy: loading this
plugin must stay cheap for test runs that never use it."""

from dataclasses import replace

import pytest


def small_config(num_requests=300, qps=6.0, replicas=2, pp=1, **kw):
    from vidur_fast.config.predictor import PredictorConfig
    from vidur_fast.config.sim import (
        ClusterConfig,
        SarathiScheduler,
        SimConfig,
        VllmV1Scheduler,
    )
    from vidur_fast.config.workload import PoissonIntervals, SyntheticWorkload

    # few sequences and blocks, so queues build up and requests get preempted
    sched = SarathiScheduler() if pp > 1 else VllmV1Scheduler(max_num_seqs=4, num_blocks=600)
    return SimConfig(
        cluster=ClusterConfig(num_replicas=replicas, pp=pp),
        workload=SyntheticWorkload(num_requests=num_requests, intervals=PoissonIntervals(qps=qps)),
        predictor=PredictorConfig(
            source="roofline", max_tokens=8192, max_prefill_chunk=4096, max_batch_size=64
        ),
        quiet=True,
        scheduler=sched,
        **kw,
    )


def write_plain(result, path, **flags):
    """Write result to path with the default outputs plus the given OutputConfig flags."""
    from vidur_fast.config.sim import OutputConfig
    from vidur_fast.outputs.writer import write_run

    return write_run(result, replace(OutputConfig(), dir=str(path), **flags))


@pytest.fixture(scope="session")
def small_result():
    """Two replicas, vLLM v1 with 4 sequences and 600 blocks, 300 requests at 6 QPS."""
    from vidur_fast.api import simulate

    return simulate(small_config())


@pytest.fixture(scope="session")
def pp_result():
    """Two replicas with two pipeline stages each (Sarathi), 150 requests."""
    from vidur_fast.api import simulate

    return simulate(small_config(num_requests=150, qps=8.0, pp=2))


@pytest.fixture(scope="session")
def small_run_dir(small_result, tmp_path_factory):
    """small_result written with plots, trace and parquet."""
    path = tmp_path_factory.mktemp("runs") / "base"
    return write_plain(small_result, path, write_plots=True, write_trace=True, write_parquet=True)


def pd_config(num_requests=120, qps=20.0):
    """Two prefill and two decode H100 replicas (vllm_v1, no prefix caching) on nodes of their
    own, a 5 GB/s KV network link shared fairly by each prefill replica's transfers, so
    transfers overlap and take different times."""
    from vidur_fast.config.convert import build_dataclass
    from vidur_fast.config.sim import SimConfig

    sched = {"type": "vllm_v1", "enable_prefix_caching": False, "async_scheduling": False}
    return build_dataclass(
        SimConfig,
        {
            "cluster": {
                "pools": [
                    {"device": "h100", "num_replicas": 2, "role": "prefill"},
                    {"device": "h100", "num_replicas": 2, "role": "decode"},
                ],
                "kv_transfer": {
                    "bandwidth_gbps": 5.0,
                    "contention": "fair_share",
                    "placement": "separate_nodes",
                },
            },
            "predictor": {
                "source": "roofline",
                "max_tokens": 8192,
                "max_prefill_chunk": 4096,
                "max_batch_size": 64,
            },
            "scheduler": sched,
            "router": "lor",
            "quiet": True,
            "workload": {
                "type": "synthetic",
                "num_requests": num_requests,
                "intervals": {"type": "PoissonIntervals", "qps": qps},
            },
        },
        "",
    )


@pytest.fixture(scope="session")
def pd_result():
    """2P2D disaggregated serving, 120 requests at 20 QPS."""
    from vidur_fast.api import simulate

    return simulate(pd_config())


@pytest.fixture(scope="session")
def pd_run_dir(pd_result, tmp_path_factory):
    """pd_result written with plots and trace."""
    path = tmp_path_factory.mktemp("runs") / "pd"
    return write_plain(pd_result, path, write_plots=True, write_trace=True)
