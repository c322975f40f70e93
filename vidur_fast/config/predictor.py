"""Execution-time predictor settings (a frozen dataclass for the tyro CLI)."""

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class PredictorConfig:
    """How operator samples become timing grids: source, regressor, grid extent,
    overheads."""

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
    moe_ep: int = 1
    """Mixture-of-experts models: expert-parallel ranks of the MoE layers (each holds
    experts / moe_ep whole experts); the expert tensor parallelism is then
    moe_tp = tp x attention_dp / moe_ep (vLLM: --enable-expert-parallel gives moe_ep = tp x dp).
    Dense models ignore it."""
    attention_dp: int = 1
    """Mixture-of-experts models: attention data-parallel ranks (vLLM --data-parallel-size),
    each with tp GPUs, that share the MoE layers. Each replica is one rank; every attention_dp
    consecutive replicas (of a pool, with cluster.pools) are one engine whose ranks step in
    lockstep (cluster.num_replicas = engines x attention_dp; docs/timing_model.md, "Attention
    data parallelism")."""
    moe_routing: Literal["power_law_1.2", "power_law_1.01", "balanced"] = "power_law_1.2"
    """Routing skew of the measured MoE kernels: tokens per expert drawn from a power law of
    exponent 1.2 (NVIDIA's default when its tables are used), 1.01, or perfectly balanced."""
    moe_kernel: str = ""
    """Mixture-of-experts models, aiconfigurator source: use the measured MoE kernel whose
    name contains this text (e.g. "marlin", what vLLM runs with VLLM_MXFP4_USE_MARLIN=1),
    at the nearest measured shape if that kernel was measured at another; "" = the fastest
    kernel measured at the model's shape."""
    allreduce_rms_fusion: bool = False
    """aiconfigurator source: the engine fuses each TP all-reduce with the residual
    add and RMSNorm that follow it (vLLM's `fuse_allreduce_rms` compilation pass, FlashInfer's
    fused kernel) for all-reduces up to vLLM's size limit (64 / 2 / 1 MB at TP 2 / 4 / 8), so
    those ops cost nothing apart from the all-reduce; False: separate kernels."""
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
    vidur_forests: bool = False
    """Vidur's own forests (random_forest, work_normalized False): each operator fit on its rows
    as the profile gives them (file order, duplicate shapes kept), prefill attention on
    (kv, chunk**2), in Vidur's training order, all tree seeds drawn from one
    RandomState(random_state) as Vidur's unseeded forests draw them from the NumPy RNG its
    --seed seeds; grids read straight off the forests (flat past the profiled shapes)."""
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
    """Host time per step and pipeline stage (scheduling, input preparation, output
    processing). A synchronous engine adds it to every step; with vllm_v1 async scheduling it
    overlaps the step in flight, so a step lasts max(GPU, host). 0 by default: no measurement
    of the calibration set identifies it (docs/timing_model.md, "Engine model")."""
    cpu_overhead_per_seq_ms: float = 0.0
    """Host time per request in the batch, per step and stage (as cpu_overhead_ms)."""
    sampler_ms: float | None = None
    """GPU time per step outside the per-layer model, dominated by sampling with the model's
    generation config (top-k/top-p over the vocabulary), on the last stage; GPU work, so it
    never overlaps. None: the engine's default (vllm_v1: 1.42, calibrated; Vidur's
    schedulers: 0). Set 0 for greedy requests (temperature 0)."""
    sampler_per_seq_ms: float | None = None
    """The same per request in the batch (None: vllm_v1 0.040, calibrated; Vidur's: 0)."""
    eager_launch_ms_per_layer: float | None = None
    """Host time to launch one layer's kernels outside a CUDA graph. vLLM replays CUDA graphs
    for decode-sized batches only; a step in which some request has more than one new token (a
    prompt chunk) is launched kernel by kernel, so it lasts at least this much per layer
    (0 = no floor; None: the engine's default, vllm_v1 0.45 calibrated, Vidur's schedulers 0)."""
    graph_max_tokens: int | None = None
    """Largest batch (tokens) the engine captured CUDA graphs for that also cover mixed
    prefill-decode batches (vLLM's piecewise graphs: 512 by default since vLLM 0.11, 2 x
    max_num_seqs before; 0 = mixed batches never replay a graph, as with cudagraph_mode
    FULL_DECODE_ONLY). Such batches are exempt from eager_launch_ms_per_layer. None: the
    engine's default (vllm_v1 512, Vidur's schedulers 0)."""
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
