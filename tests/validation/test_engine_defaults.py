"""One engine model of vLLM serving: simulate's vllm_v1 defaults are what validate simulates."""

from dataclasses import replace

import numpy as np
import pytest

from vidur_fast.config.engine import (
    VLLM_INGEST_MS,
    VLLM_RESPONSE_MS,
    VLLM_SAMPLER_MS,
    VLLM_SAMPLER_PER_SEQ_MS,
    resolve_engine,
)
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.presets import PRESETS
from vidur_fast.config.sim import ClusterConfig, SarathiScheduler, SimConfig, VllmV1Scheduler
from vidur_fast.config.vidur_flags import config_from_vidur_args
from vidur_fast.config.workload import ClosedLoopWorkload, FixedLengths
from vidur_fast.validation.bench_csv import BenchRow
from vidur_fast.validation.run import ValidateConfig, row_config


def _row(**kw) -> BenchRow:
    base = dict(
        index=0, id="r", model="Qwen/Qwen3-32B", device="h100_sxm", tp=2, pp=1,
        concurrency=16, isl=1024, osl=128, precision="", kv_cache_dtype="", backend="vllm",
        backend_version="0.12.0", mode="agg", num_requests=0, ttft_ms=100.0, tpot_ms=20.0,
    )  # fmt: skip
    base.update(kw)
    return BenchRow(**base)


@pytest.mark.parametrize("precision", ["", "fp8"])
def test_simulate_default_equals_the_validated_row_config_modulo_workload(precision):
    row = _row(precision=precision)
    validated = row_config(row, ValidateConfig(csv="x"))
    # what a planner writes for the same deployment: model, GPU, TP, weight precision
    prec = "bf16" if not precision else precision
    planner = resolve_engine(
        SimConfig(
            cluster=ClusterConfig(model=row.model, device="h100", tp=row.tp),
            predictor=PredictorConfig(precision=prec),
            workload=validated.workload,
            seed=validated.seed,
            quiet=True,
        )
    )
    assert planner == validated


def test_vllm_v1_engine_defaults():
    cfg = resolve_engine(SimConfig(workload=ClosedLoopWorkload(lengths=FixedLengths())))
    s = cfg.scheduler
    assert isinstance(s, VllmV1Scheduler) and s.async_scheduling
    assert (s.max_num_batched_tokens, s.max_num_seqs, s.max_num_partial_prefills) == (8192, 1024, 1)
    assert cfg.cluster.memory_model == "vllm"
    p = cfg.predictor
    assert (p.sampler_ms, p.sampler_per_seq_ms) == (VLLM_SAMPLER_MS, VLLM_SAMPLER_PER_SEQ_MS)
    assert (p.cpu_overhead_ms, p.cpu_overhead_per_seq_ms) == (0.0, 0.0)
    assert (p.source, p.kernel_envelope) == ("aiconfigurator", True)
    assert (cfg.workload.ingest_ms, cfg.workload.response_ms) == (VLLM_INGEST_MS, VLLM_RESPONSE_MS)
    # explicit settings win over the engine defaults
    given = SimConfig(
        predictor=PredictorConfig(sampler_ms=0.0),
        cluster=ClusterConfig(memory_model="vidur"),
        workload=ClosedLoopWorkload(ingest_ms=0.0),
    )
    out = resolve_engine(given)
    assert out.predictor.sampler_ms == 0.0
    assert out.predictor.sampler_per_seq_ms == VLLM_SAMPLER_PER_SEQ_MS
    assert out.cluster.memory_model == "vidur"
    assert (out.workload.ingest_ms, out.workload.response_ms) == (0.0, VLLM_RESPONSE_MS)


def test_vidur_schedulers_keep_vidur_defaults():
    cfg = resolve_engine(
        SimConfig(scheduler=SarathiScheduler(), workload=ClosedLoopWorkload(lengths=FixedLengths()))
    )
    assert cfg.cluster.memory_model == "vidur"
    assert (cfg.predictor.sampler_ms, cfg.predictor.sampler_per_seq_ms) == (0.0, 0.0)
    assert (cfg.workload.ingest_ms, cfg.workload.response_ms) == (0.0, 0.0)


def test_vidur_compat_vllm_v1_keeps_vidurs_synchronous_engine():
    cfg = resolve_engine(config_from_vidur_args(["--replica_scheduler_config_type", "vllm_v1"]))
    s = cfg.scheduler
    assert isinstance(s, VllmV1Scheduler)
    assert not s.async_scheduling and s.max_num_partial_prefills == 0
    assert cfg.cluster.memory_model == "vidur"
    assert (cfg.predictor.sampler_ms, cfg.predictor.sampler_per_seq_ms) == (0.0, 0.0)


def test_presets_carry_the_engine_model():
    for name, (_, cfg) in PRESETS.items():
        out = resolve_engine(cfg)
        if isinstance(cfg.scheduler, VllmV1Scheduler):
            assert out.scheduler.async_scheduling, name
            assert out.cluster.memory_model == "vllm", name
            assert out.predictor.sampler_ms == VLLM_SAMPLER_MS, name
        else:
            assert out.cluster.memory_model == "vidur", name
            assert out.predictor.sampler_ms == 0.0, name


def test_resolving_twice_changes_nothing():
    cfg = resolve_engine(SimConfig())
    assert resolve_engine(cfg) == cfg
    assert resolve_engine(replace(cfg, seed=3)).seed == 3


def test_open_loop_vllm_v1_runs_the_front_end_by_default():
    from vidur_fast.api import simulate
    from vidur_fast.config.workload import StaticIntervals, SyntheticWorkload

    wl = SyntheticWorkload(
        num_requests=3,
        lengths=FixedLengths(prefill_tokens=64, decode_tokens=4),
        intervals=StaticIntervals(),
    )
    fast = dict(source="roofline", max_tokens=4096, max_batch_size=8, max_prefill_chunk=4096)
    base = SimConfig(workload=wl, predictor=PredictorConfig(**fast), quiet=True)
    on = simulate(base)
    off = simulate(replace(base, workload=replace(wl, ingest_ms=0.0, response_ms=0.0)))
    assert on.config.workload.ingest_ms == VLLM_INGEST_MS
    ttft_on = on.requests["prefill_e2e_time"].to_numpy()
    ttft_off = off.requests["prefill_e2e_time"].to_numpy()
    # three sends at t = 0 pass the serial front end 2 ms apart; each token arrives 1 ms later
    assert ttft_on[0] - ttft_off[0] >= (VLLM_INGEST_MS + VLLM_RESPONSE_MS) / 1e3 - 1e-9
    assert np.all(on.requests["arrived_at"].to_numpy() == 0.0)


def test_a_planner_gets_the_validated_answer(shared_dir):
    """simulate on a calibration row's deployment and load (the closed loop a planner writes)
    gives the TTFT and TPOT that validate reports for that row."""
    from vidur_fast.api import simulate
    from vidur_fast.validation.bench_csv import read_bench_csv
    from vidur_fast.validation.run import simulate_row

    row = read_bench_csv(shared_dir / "validation/silicon_vllm_h100_qwen3_32b.csv")[0]
    validated = simulate_row(row, ValidateConfig(csv="x"))
    wl = ClosedLoopWorkload(
        concurrency=row.concurrency,
        num_requests=10 * row.concurrency,
        lengths=FixedLengths(prefill_tokens=row.isl, decode_tokens=row.osl),
        think_time="exponential",
    )
    cfg = SimConfig(cluster=ClusterConfig(model=row.model, device="h100", tp=row.tp), workload=wl)
    cl = simulate(replace(cfg, quiet=True)).summary["closed_loop"]
    assert 1e3 * cl["ttft"]["mean"] == validated.sim_ttft_ms
    assert 1e3 * cl["tpot"]["mean"] == validated.sim_tpot_ms
