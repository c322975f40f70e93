"""Named starting configurations for common deployments (`vidur-fast --preset NAME`).

A preset is a complete SimConfig built only from embedded data; command-line flags given after
it override its fields, so a preset is a starting point, not a fixed scenario.
"""

from dataclasses import replace

from vidur_fast.config.sim import (
    ClusterConfig,
    LeastOutstandingPrefillRouter,
    SarathiScheduler,
    SimConfig,
    VllmV1Scheduler,
)
from vidur_fast.config.workload import (
    FixedLengths,
    GammaIntervals,
    PoissonIntervals,
    SyntheticWorkload,
    ZipfLengths,
)
from vidur_fast.errors import ConfigError


def _sim(cluster: ClusterConfig, workload: SyntheticWorkload, **kw) -> SimConfig:
    return SimConfig(cluster=cluster, workload=workload, **kw)


def _chat(qps: float, n: int = 2000) -> SyntheticWorkload:
    """Chat-like traffic: skewed lengths up to 8K tokens, Poisson arrivals."""
    return SyntheticWorkload(
        num_requests=n,
        lengths=ZipfLengths(min_tokens=256, max_tokens=8192, prefill_to_decode_ratio=8.0),
        intervals=PoissonIntervals(qps=qps),
    )


PRESETS: dict[str, tuple[str, SimConfig]] = {
    "llama3-8b-h100": (
        "the default: Llama-3-8B on one H100, vllm_v1, 1,000 fixed 2048/512 requests at 1 QPS",
        SimConfig(),
    ),
    "llama3-8b-h100-x4-lop": (
        "4 replicas of Llama-3-8B on H100 behind least-outstanding-prefill routing, chat traffic",
        _sim(
            ClusterConfig(num_replicas=4),
            _chat(qps=16.0, n=5000),
            router=LeastOutstandingPrefillRouter(),
        ),
    ),
    "llama3-70b-h100-tp4": (
        "Llama-3-70B on 4 H100s (TP4), vllm_v1, chat traffic",
        _sim(ClusterConfig(model="meta-llama/Meta-Llama-3-70B", tp=4), _chat(qps=2.5)),
    ),
    "llama3.1-70b-h200-tp8": (
        "Llama-3.1-70B on 8 H200s (TP8), vllm_v1 with 16K-token steps, chat traffic",
        _sim(
            ClusterConfig(model="meta-llama/Llama-3.1-70B", device="h200", tp=8),
            _chat(qps=5.0),
            scheduler=VllmV1Scheduler(max_num_batched_tokens=16384),
        ),
    ),
    "qwen3-32b-h100-tp2": (
        "Qwen3-32B on 2 H100s (TP2), vllm_v1, 1K-in/256-out requests",
        _sim(
            ClusterConfig(model="Qwen/Qwen3-32B", tp=2),
            SyntheticWorkload(
                num_requests=1000,
                lengths=FixedLengths(prefill_tokens=1024, decode_tokens=256),
                intervals=PoissonIntervals(qps=4.0),
            ),
        ),
    ),
    "llama2-7b-a100-sarathi": (
        "Vidur's classic setup: Llama-2-7B on an A100, Sarathi 512-token chunks, bursty arrivals",
        _sim(
            ClusterConfig(model="meta-llama/Llama-2-7b-hf", device="a100"),
            SyntheticWorkload(
                num_requests=1000,
                lengths=ZipfLengths(min_tokens=1024, max_tokens=4096),
                intervals=GammaIntervals(qps=2.0, cv=2.0),
            ),
            scheduler=SarathiScheduler(chunk_size=512, batch_size_cap=128),
        ),
    ),
    "llama2-70b-a100-tp4-pp2": (
        "Llama-2-70B on 8 A100s (TP4 x PP2), Sarathi, bursty arrivals",
        _sim(
            ClusterConfig(model="meta-llama/Llama-2-70b-hf", device="a100", tp=4, pp=2),
            SyntheticWorkload(
                num_requests=1000,
                lengths=ZipfLengths(min_tokens=1024, max_tokens=4096),
                intervals=GammaIntervals(qps=1.0, cv=2.0),
            ),
            scheduler=SarathiScheduler(chunk_size=512, batch_size_cap=128),
        ),
    ),
}


def preset_names() -> list[str]:
    return sorted(PRESETS)


def get_preset(name: str) -> SimConfig:
    if name not in PRESETS:
        raise ConfigError(
            f"--preset: unknown preset {name!r}; presets: {', '.join(preset_names())}"
        )
    return replace(PRESETS[name][1])


def format_presets() -> str:
    width = max(len(n) for n in PRESETS)
    return "\n".join(f"{n:<{width}}  {PRESETS[n][0]}" for n in preset_names())
