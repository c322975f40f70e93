"""Range checks of workload configs (open and closed loop); every error names the field path."""

import math
from numbers import Integral, Real

from vidur_fast.config.workload import (
    ClosedLoopWorkload,
    FixedLengths,
    GammaIntervals,
    PoissonIntervals,
    StaticIntervals,
    SyntheticWorkload,
    TraceIntervals,
    TraceLengths,
    TraceWorkload,
    UniformIntervals,
    UniformLengths,
    ZipfLengths,
)
from vidur_fast.errors import ConfigError

# Bounds that keep every derived array and int64 sum in range (and fail before allocating).
MAX_REQUESTS = 2**31 - 1
MAX_REQUEST_TOKENS = 2**31 - 1


def _fail(field: str, rule: str, value: object) -> None:
    raise ConfigError(f"{field}: {rule} (got {value!r})")


def _positive(field: str, value: float) -> None:
    if not (isinstance(value, Real) and math.isfinite(value) and value > 0):
        _fail(field, "must be > 0", value)


def _at_least(field: str, value: int, low: int) -> None:
    if not isinstance(value, Integral) or isinstance(value, bool) or value < low:
        _fail(field, f"must be an integer >= {low}", value)


def _at_most(field: str, value: int, high: int) -> None:
    if value > high:
        _fail(field, f"must be <= {high}", value)


def validate_lengths(cfg: object, where: str) -> None:
    match cfg:
        case FixedLengths():
            _at_least(f"{where}.prefill_tokens", cfg.prefill_tokens, 1)
            _at_least(f"{where}.decode_tokens", cfg.decode_tokens, 1)
            _at_most(f"{where}.prefill_tokens", cfg.prefill_tokens, MAX_REQUEST_TOKENS)
            _at_most(f"{where}.decode_tokens", cfg.decode_tokens, MAX_REQUEST_TOKENS)
        case UniformLengths() | ZipfLengths():
            # total >= 2 so that prompt and output each get at least one token.
            _at_least(f"{where}.min_tokens", cfg.min_tokens, 2)
            _at_least(f"{where}.max_tokens", cfg.max_tokens, cfg.min_tokens)
            _at_most(f"{where}.max_tokens", cfg.max_tokens, MAX_REQUEST_TOKENS)
            ratio = cfg.prefill_to_decode_ratio
            if not (math.isfinite(ratio) and ratio >= 0):
                _fail(f"{where}.prefill_to_decode_ratio", "must be finite and >= 0", ratio)
            if isinstance(cfg, ZipfLengths) and not 0 < cfg.theta < 1:
                _fail(f"{where}.theta", "must be in (0, 1)", cfg.theta)
        case TraceLengths():
            _positive(f"{where}.prefill_scale", cfg.prefill_scale)
            _positive(f"{where}.decode_scale", cfg.decode_scale)
        case _:
            raise ConfigError(f"{where}: unknown length generator {type(cfg).__name__}")


def validate_intervals(cfg: object, where: str) -> None:
    match cfg:
        case PoissonIntervals() | UniformIntervals():
            _positive(f"{where}.qps", cfg.qps)
        case GammaIntervals():
            _positive(f"{where}.qps", cfg.qps)
            _positive(f"{where}.cv", cfg.cv)
        case StaticIntervals():
            pass
        case TraceIntervals():
            _positive(f"{where}.time_scale", cfg.time_scale)
        case _:
            raise ConfigError(f"{where}: unknown interval generator {type(cfg).__name__}")


def validate_front_end(cfg: object, where: str) -> None:
    """The API-server front end of any workload (None = the engine's default)."""
    if cfg.ingest_ms is not None:
        _finite_at_least(f"{where}.ingest_ms", cfg.ingest_ms, 0.0)
    _finite_at_least(f"{where}.ingest_us_per_token", cfg.ingest_us_per_token, 0.0)
    if cfg.response_ms is not None:
        _finite_at_least(f"{where}.response_ms", cfg.response_ms, 0.0)


def validate_synthetic(cfg: SyntheticWorkload, where: str) -> None:
    if cfg.num_requests is not None:
        _at_least(f"{where}.num_requests", cfg.num_requests, 1)
        _at_most(f"{where}.num_requests", cfg.num_requests, MAX_REQUESTS)
    if cfg.duration_s is not None:
        _positive(f"{where}.duration_s", cfg.duration_s)
    if cfg.max_tokens is not None:
        _at_least(f"{where}.max_tokens", cfg.max_tokens, 2)
    validate_lengths(cfg.lengths, f"{where}.lengths")
    validate_intervals(cfg.intervals, f"{where}.intervals")
    validate_front_end(cfg, where)
    unbounded = cfg.num_requests is None and cfg.duration_s is None
    if unbounded and not isinstance(cfg.intervals, TraceIntervals):
        raise ConfigError(
            f"{where}.num_requests: set num_requests or duration_s (both are None; only "
            "trace intervals end by themselves)"
        )
    if cfg.num_requests is None and isinstance(cfg.intervals, StaticIntervals):
        raise ConfigError(
            f"{where}.num_requests: static intervals need num_requests (every request arrives "
            "at t=0, so duration_s never ends the workload)"
        )


def validate_trace(cfg: TraceWorkload, where: str) -> None:
    if not cfg.path:
        _fail(f"{where}.path", "must name a trace file", cfg.path)
    if cfg.format not in ("auto", "vidur", "mooncake", "azure"):
        _fail(f"{where}.format", "must be one of auto, vidur, mooncake, azure", cfg.format)
    if cfg.clip not in ("proportional", "prompt", "error"):
        _fail(f"{where}.clip", "must be one of proportional, prompt, error", cfg.clip)
    if cfg.num_requests is not None:
        _at_least(f"{where}.num_requests", cfg.num_requests, 1)
    _at_least(f"{where}.offset", cfg.offset, 0)
    for name in ("start_s", "end_s"):
        value = getattr(cfg, name)
        if value is not None and not (isinstance(value, Real) and math.isfinite(value)):
            _fail(f"{where}.{name}", "must be a finite number of seconds or None", value)
    if cfg.start_s is not None and cfg.end_s is not None and cfg.end_s <= cfg.start_s:
        _fail(f"{where}.end_s", f"must be > start_s ({cfg.start_s})", cfg.end_s)
    _positive(f"{where}.prefill_scale", cfg.prefill_scale)
    _positive(f"{where}.decode_scale", cfg.decode_scale)
    _positive(f"{where}.time_scale", cfg.time_scale)
    if cfg.max_tokens is not None:
        _at_least(f"{where}.max_tokens", cfg.max_tokens, 2)
    validate_front_end(cfg, where)


def validate_workload(cfg: object, where: str = "workload") -> None:
    """Raise ConfigError for the first out-of-range field of a workload config."""
    match cfg:
        case SyntheticWorkload():
            validate_synthetic(cfg, where)
        case TraceWorkload():
            validate_trace(cfg, where)
        case ClosedLoopWorkload():
            validate_closed_loop(cfg, where)
        case _:
            raise ConfigError(f"{where}: unknown workload type {type(cfg).__name__}")


def validate_build_args(seed: int, block_size: int) -> None:
    _at_least("seed", seed, 0)
    _at_least("block_size", block_size, 1)


# ---- closed loop ----


def _int_at_least(field: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        _fail(field, f"must be an integer >= {low}", value)


def _finite_at_least(field: str, value: object, low: float, strict: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < low or (strict and value == low):
        _fail(field, f"must be a finite number {'>' if strict else '>='} {low}", value)


def validate_closed_loop(cfg: ClosedLoopWorkload, where: str = "workload") -> None:
    """Raise ConfigError naming the first out-of-range field of a closed-loop workload."""
    _int_at_least(f"{where}.concurrency", cfg.concurrency, 1)
    _int_at_least(f"{where}.num_requests", cfg.num_requests, 1)
    if cfg.duration_s is not None:
        _finite_at_least(f"{where}.duration_s", cfg.duration_s, 0.0, strict=True)
    validate_lengths(cfg.lengths, f"{where}.lengths")
    _finite_at_least(f"{where}.think_time_s", cfg.think_time_s, 0.0)
    if cfg.think_time not in ("fixed", "exponential"):
        _fail(f"{where}.think_time", "must be one of fixed, exponential", cfg.think_time)
    _finite_at_least(f"{where}.ramp_up_s", cfg.ramp_up_s, 0.0)
    _int_at_least(f"{where}.warmup_requests", cfg.warmup_requests, 0)
    if cfg.warmup_requests >= cfg.num_requests:
        _fail(
            f"{where}.warmup_requests",
            f"must be < num_requests ({cfg.num_requests}) so that some requests are measured",
            cfg.warmup_requests,
        )
    _finite_at_least(f"{where}.warmup_s", cfg.warmup_s, 0.0)
    if cfg.measure_s is not None:
        _finite_at_least(f"{where}.measure_s", cfg.measure_s, 0.0, strict=True)
    if cfg.max_tokens is not None:
        _int_at_least(f"{where}.max_tokens", cfg.max_tokens, 2)
    validate_front_end(cfg, where)
    _int_at_least(f"{where}.prompt_pool", cfg.prompt_pool, 0)
    if cfg.prompt_pool and cfg.max_tokens is not None:
        _fail(f"{where}.prompt_pool", "cannot be combined with max_tokens", cfg.prompt_pool)
