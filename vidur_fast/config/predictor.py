"""Execution-time predictor settings (a frozen dataclass for the tyro CLI)."""

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class PredictorConfig:
    """How operator samples become timing grids: source, regressor, grid extent, overheads."""

    source: Literal["aiconfigurator", "vidur", "roofline"] = "aiconfigurator"
    """Where operator samples come from: NVIDIA's measured database, a Vidur profiling dir, or
    an analytic roofline from device specs."""
    profile_dir: str | None = None
    """Directory in Vidur's data/profiling layout (compute/, network/); for source=vidur."""
    backend: Literal["vllm", "trtllm", "sglang"] = "vllm"
    """Serving framework whose kernels were measured (aiconfigurator source)."""
    precision: Literal["bf16", "fp8", "fp8_block", "nvfp4"] = "bf16"
    """Weight/GEMM precision: bf16, fp8 (per-tensor scaled), fp8_block (128x128 block-scaled,
    aiconfigurator only) or nvfp4 (4-bit weights and activations with an fp8 scale per 16
    elements; aiconfigurator tables of Blackwell GPUs only). fp8 weights halve the weight
    memory of the planner, nvfp4 weights take 0.5625 bytes per parameter."""
    kv_cache_dtype: Literal["bf16", "fp16", "fp8"] = "bf16"
    """KV-cache element type: attention kernels measured with it (aiconfigurator), KV bytes of
    the roofline and the KV-cache save, and bytes per token in the memory planner."""
    decode_attention_kv_dtype: Literal["", "bf16", "fp16", "fp8"] = ""
    """aiconfigurator source: time decode attention with the kernels measured at this KV-cache
    dtype instead ("" = kv_cache_dtype), for an engine whose decode kernel gains nothing from a
    narrower cache. KV bytes, the KV-cache save and the memory planner keep kv_cache_dtype."""
    kernel_envelope: bool = True
    """aiconfigurator source: time each GEMM by the fastest kernel measured at a shape at least
    as large in every dimension, and each all-reduce by the fastest one measured at a message
    at least as large (a smaller problem can always run padded on it); this drops measured
    cells that a faster neighbouring kernel beats. False: the measured cells as they are."""
    regressor: Literal["random_forest", "polynomial"] = "random_forest"
    """Per-operator model: random forest (default) or polynomial least squares."""
    n_estimators: int = 100
    """Random forest: number of trees (fixed; no hyper-parameter search)."""
    max_depth: int | None = None
    """Random forest: maximum tree depth (None grows until leaves are pure)."""
    min_samples_split: int = 2
    """Random forest: minimum samples to split a node."""
    random_state: int = 0
    """Seed of the forests and of the accuracy hold-out split; fits are deterministic."""
    work_normalized: bool = True
    """Fit the regressor on time / (a + b . work) (a non-negative linear work baseline) rather
    than raw time; interpolates sparse, log-spaced tables far better. False: Vidur's plain fit."""
    polynomial_degree: int = 3
    """Polynomial regressor: degree of the feature expansion."""
    max_tokens: int = 131072
    """T: token grids cover 0..T tokens and kv grids 0..T cached tokens."""
    max_batch_size: int = 512
    """B: decode grid covers batch sizes 0..B."""
    max_prefill_chunk: int = 16384
    """C: prefill grid covers equivalent chunks 0..C (in steps of chunk_granularity)."""
    kv_granularity: int = 64
    """g: kv-length step of the decode and prefill grids (batch kv is rounded up to it)."""
    chunk_granularity: int = 32
    """gc: prefill chunk step (1 reproduces Vidur main's exact chunk keys)."""
    decode_batching_overhead: float = 0.0
    """Fraction added to decode attention when a batch holds >1 decode (GQA models only)."""
    prefill_batching_overhead: float = 0.0
    """Fraction added to prefill attention when a batch holds >1 prefill (GQA models only)."""
    nccl_launch_overhead_ms: float = 0.0
    """Host launch overhead added to every TP all-reduce call (Vidur main uses 0.02)."""
    cpu_overhead_ms: float = 0.0
    """Fixed host overhead per pipeline stage (scheduling, sampling, input preparation)."""
    cpu_overhead_per_seq_ms: float = 0.0
    """Host overhead per request in the batch, per stage (per-request scheduling, input
    preparation and output processing of a synchronous engine loop)."""
    eager_launch_ms_per_layer: float = 0.0
    """Host time to launch one layer's kernels outside a CUDA graph. vLLM replays CUDA graphs
    for decode-sized batches only; a step in which some request has more than one new token (a
    prompt chunk) is launched kernel by kernel, so it lasts at least this much per layer
    (0 = no floor)."""
    graph_max_tokens: int = 0
    """Largest batch (tokens) the engine captured CUDA graphs for that also cover mixed
    prefill-decode batches (vLLM's piecewise graphs: 512 by default since vLLM 0.11, 2 x
    max_num_seqs before; 0 = mixed batches never replay a graph, as with cudagraph_mode
    FULL_DECODE_ONLY). Such batches are exempt from eager_launch_ms_per_layer."""
    kv_rule: Literal["per_request", "sum"] = "sum"
    """Prefill kv feature: sum of per-request kv rounded up to g (Vidur main), or the sum of kv
    rounded once (Vidur canary)."""
    cache_dir: str | None = None
    """Grid cache directory (default: $VIDUR_FAST_CACHE or ~/.cache/vidur-fast/grids)."""
    cache_mode: Literal["use", "ignore", "require", "refresh"] = "use"
    """use: load or build and store; ignore: build, never read or write; require: load or fail;
    refresh: rebuild and overwrite."""

    @property
    def n_kv(self) -> int:
        """Rows of the kv axis (j = 0..T//g)."""
        return self.max_tokens // self.kv_granularity + 1

    @property
    def n_chunk(self) -> int:
        """Columns of the prefill chunk axis (c = 0..C//gc)."""
        return self.max_prefill_chunk // self.chunk_granularity + 1
