"""Execution-time predictor settings (a frozen dataclass for the tyro CLI) and their validation."""

import math
from dataclasses import dataclass
from typing import Literal

from vidur_fast.errors import ConfigError

# Largest decode or prefill grid accepted (cells); 2**27 float64 cells is 1 GiB.
MAX_GRID_CELLS = 2**27


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
    precision: Literal["bf16", "fp8", "fp8_block"] = "bf16"
    """Weight/GEMM precision: bf16, fp8 (per-tensor scaled) or fp8_block (128x128 block-scaled,
    aiconfigurator only). fp8 weights also halve the weight memory of the planner."""
    kv_cache_dtype: Literal["bf16", "fp16", "fp8"] = "bf16"
    """KV-cache element type: attention kernels measured with it (aiconfigurator), KV bytes of
    the roofline and the KV-cache save, and bytes per token in the memory planner."""
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


_CHOICES = {
    "source": ("aiconfigurator", "vidur", "roofline"),
    "backend": ("vllm", "trtllm", "sglang"),
    "precision": ("bf16", "fp8", "fp8_block"),
    "kv_cache_dtype": ("bf16", "fp16", "fp8"),
    "regressor": ("random_forest", "polynomial"),
    "kv_rule": ("per_request", "sum"),
    "cache_mode": ("use", "ignore", "require", "refresh"),
}

# field -> smallest allowed value
_INT_MIN = {
    "n_estimators": 1,
    "min_samples_split": 2,
    "random_state": 0,
    "polynomial_degree": 1,
    "max_tokens": 8,
    "max_batch_size": 1,
    "max_prefill_chunk": 1,
    "kv_granularity": 1,
    "chunk_granularity": 1,
}

_NONNEG_FLOATS = (
    "decode_batching_overhead",
    "prefill_batching_overhead",
    "nccl_launch_overhead_ms",
    "cpu_overhead_ms",
    "cpu_overhead_per_seq_ms",
)


def _fail(field: str, why: str, value: object) -> None:
    raise ConfigError(f"predictor.{field}: {why} (got {value!r})")


def validate_predictor(cfg: PredictorConfig) -> None:
    """Raise ConfigError naming the first bad field of cfg; return None when all are valid."""
    for name, allowed in _CHOICES.items():
        value = getattr(cfg, name)
        if value not in allowed:
            _fail(name, f"must be one of {', '.join(allowed)}", value)
    for name, low in _INT_MIN.items():
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(name, "must be an integer", value)
        if value < low:
            _fail(name, f"must be >= {low}", value)
    if not isinstance(cfg.work_normalized, bool):
        _fail("work_normalized", "must be True or False", cfg.work_normalized)
    if cfg.max_depth is not None and (not isinstance(cfg.max_depth, int) or cfg.max_depth < 1):
        _fail("max_depth", "must be None or an integer >= 1", cfg.max_depth)
    if cfg.polynomial_degree > 6:
        _fail("polynomial_degree", "must be <= 6", cfg.polynomial_degree)
    for name in _NONNEG_FLOATS:
        value = getattr(cfg, name)
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            _fail(name, "must be a finite number >= 0", value)
    if cfg.kv_granularity > cfg.max_tokens:
        _fail("kv_granularity", f"must be <= max_tokens ({cfg.max_tokens})", cfg.kv_granularity)
    if cfg.chunk_granularity > cfg.max_prefill_chunk:
        _fail(
            "chunk_granularity",
            f"must be <= max_prefill_chunk ({cfg.max_prefill_chunk})",
            cfg.chunk_granularity,
        )
    if (cfg.max_batch_size + 1) * cfg.n_kv > MAX_GRID_CELLS:
        _fail(
            "max_batch_size",
            f"decode grid of {cfg.max_batch_size + 1} x {cfg.n_kv} cells exceeds {MAX_GRID_CELLS}",
            cfg.max_batch_size,
        )
    if cfg.n_kv * cfg.n_chunk > MAX_GRID_CELLS:
        _fail(
            "chunk_granularity",
            f"prefill grid of {cfg.n_kv} x {cfg.n_chunk} cells exceeds {MAX_GRID_CELLS}; "
            "raise the granularities or lower max_tokens/max_prefill_chunk",
            cfg.chunk_granularity,
        )
    if cfg.profile_dir is not None and not cfg.profile_dir:
        _fail("profile_dir", "must be a directory path or None", cfg.profile_dir)
