"""The B200 NVFP4 GEMM tables behind docs/validation.md, "NVFP4 decode: the campaign's GEMM
kernel": which kernel each framework's table recorded, and how the TensorRT-LLM table (its
CUTLASS FP4 GEMM at the fallback tactic) sits against vLLM's (FlashInfer CuTe-DSL) at decode
sizes, as bench/bench_blackwell_tables.py prints them."""

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_blackwell_tables.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_blackwell_tables", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tables(bench):
    system = bench.get_system(bench.get_device("b200").aiconfigurator_system)
    return {
        fw: bench.newest_table(system, "gemm", fw, "gemm_perf.parquet")[1]
        for fw in bench.FRAMEWORKS
    }


def test_each_nvfp4_table_records_one_kernel(bench, tables):
    assert bench.kernel_sources(tables["vllm"], "nvfp4") == ["FlashInferCuteDslNvFp4LinearKernel"]
    assert bench.kernel_sources(tables["sglang"], "nvfp4") == ["sglang_flashinfer_cutedsl_nvfp4"]
    assert bench.kernel_sources(tables["trtllm"], "nvfp4") == ["torch_flow"]


def test_trtllm_fallback_cutlass_is_slower_at_decode_and_shrinks_with_tp(bench, tables):
    # the docs' figures: +4.8 / +3.6 / +2.4 / +2.0 ms per step at m = 4, TP 1 / 2 / 4 / 8
    gaps = []
    for tp in bench.TPS:
        vllm = bench.gemm_step_ms(tables["vllm"], "nvfp4", tp, (4,))[4]
        trtllm = bench.gemm_step_ms(tables["trtllm"], "nvfp4", tp, (4,))[4]
        gaps.append(trtllm - vllm)
    assert gaps == sorted(gaps, reverse=True)
    assert gaps[0] == pytest.approx(4.8, abs=0.1) and gaps[-1] == pytest.approx(1.95, abs=0.1)


def test_layer_gemms_at_128_tokens_tp1(bench, tables):
    # vllm-project/vllm#22346's tuned FlashInfer CUTLASS: 14.8 / 13.7 / 53.1 / 32.6 us
    vllm = bench.layer_gemm_us(tables["vllm"], "nvfp4", 1, 128)
    assert sum(vllm.values()) == pytest.approx(114.2, rel=0.1)
    trtllm = bench.layer_gemm_us(tables["trtllm"], "nvfp4", 1, 128)
    assert sum(trtllm.values()) > 1.4 * sum(vllm.values())
