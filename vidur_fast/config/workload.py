"""Workload configuration: frozen dataclasses, used directly as tyro CLI unions.

Only shapes and defaults live here; range checks are in `validate.py` so that every error names
its full field path (e.g. `workload.intervals.qps`).
"""

from dataclasses import dataclass
from typing import Annotated, Literal

from vidur_fast.config.markers import Subcommand

# ---- length generators ----


@dataclass(frozen=True)
class FixedLengths:
    """Every request has the same prompt and output length."""

    prefill_tokens: int = 2048
    """Prompt tokens per request."""
    decode_tokens: int = 512
    """Output tokens per request (>= 1)."""


@dataclass(frozen=True)
class UniformLengths:
    """Total length uniform over [min_tokens, max_tokens], split by a fixed
    prefill:decode ratio."""

    min_tokens: int = 1024
    """Smallest total (prompt + output) length, inclusive."""
    max_tokens: int = 4096
    """Largest total (prompt + output) length, inclusive."""
    prefill_to_decode_ratio: float = 20.0
    """Prompt/output ratio: decode = ceil(total / (1 + ratio)), prefill = total - decode."""


@dataclass(frozen=True)
class ZipfLengths:
    """Total length from a YCSB-style Zipf distribution over [min_tokens, max_tokens]."""

    theta: float = 0.6
    """Skew in (0, 1); larger puts more mass on short totals."""
    scramble: bool = False
    """Spread the popular totals over the range with a fixed 64-bit hash (seeded)."""
    min_tokens: int = 1024
    """Smallest total (prompt + output) length, inclusive."""
    max_tokens: int = 4096
    """Largest total (prompt + output) length, inclusive."""
    prefill_to_decode_ratio: float = 20.0
    """Prompt/output ratio: decode = ceil(total / (1 + ratio)), prefill = total - decode."""


@dataclass(frozen=True)
class TraceLengths:
    """Lengths sampled from the rows of a trace file (vidur CSV, Mooncake JSONL or
    Azure CSV)."""

    path: str
    """Trace file (plain or .gz); its format is detected from the name and columns."""
    prefill_scale: float = 1.0
    """Multiply prompt lengths by this (then truncate, at least 1)."""
    decode_scale: float = 1.0
    """Multiply output lengths by this (then truncate, at least 1)."""
    shuffle: bool = True
    """Visit rows in a seeded random order instead of file order; wraps around when exhausted."""


LengthGenerator = (
    Annotated[FixedLengths, Subcommand("fixed")]
    | Annotated[UniformLengths, Subcommand("uniform")]
    | Annotated[ZipfLengths, Subcommand("zipf")]
    | Annotated[TraceLengths, Subcommand("trace")]
)

# ---- interval generators ----


@dataclass(frozen=True)
class PoissonIntervals:
    """Poisson arrivals: exponential gaps with mean 1/qps."""

    qps: float = 1.0
    """Mean arrival rate (requests per second, > 0)."""
    truncate: bool = False
    """Clip every gap at 3/qps like Vidur does (not a true Poisson process)."""


@dataclass(frozen=True)
class GammaIntervals:
    """Gamma-distributed gaps with mean 1/qps and coefficient of variation cv (bursty
    if > 1)."""

    qps: float = 1.0
    """Mean arrival rate (requests per second, > 0)."""
    cv: float = 0.5
    """Coefficient of variation of the gaps (> 0); 1 gives Poisson arrivals."""


@dataclass(frozen=True)
class StaticIntervals:
    """All requests arrive at t = 0 (offline batch)."""


@dataclass(frozen=True)
class UniformIntervals:
    """Constant gap 1/qps (request k arrives at k/qps, k = 1, 2, ...)."""

    qps: float = 1.0
    """Arrival rate (requests per second, > 0)."""


@dataclass(frozen=True)
class TraceIntervals:
    """Arrival times replayed from a trace file, relative to its first row."""

    path: str
    """Trace file with arrival times (vidur CSV, Mooncake JSONL or Azure CSV, plain or .gz)."""
    time_scale: float = 1.0
    """Multiply arrival times by this (< 1 compresses the trace, i.e. raises the rate)."""


IntervalGenerator = (
    Annotated[PoissonIntervals, Subcommand("poisson")]
    | Annotated[GammaIntervals, Subcommand("gamma")]
    | Annotated[StaticIntervals, Subcommand("static")]
    | Annotated[UniformIntervals, Subcommand("uniform")]
    | Annotated[TraceIntervals, Subcommand("trace")]
)

# ---- workloads ----


@dataclass(frozen=True)
class SyntheticWorkload:
    """Requests from a length generator and an interval generator."""

    num_requests: int | None = 1000
    """Number of requests; None generates until duration_s (or until a trace's arrivals end)."""
    duration_s: float | None = None
    """Keep only requests arriving before this time (s); stops at num_requests if that is set."""
    lengths: LengthGenerator = FixedLengths()
    """Prompt/output length generator."""
    intervals: IntervalGenerator = PoissonIntervals()
    """Inter-arrival time generator. The first request arrives at its first gap."""
    max_tokens: int | None = None
    """Cap on prompt + output tokens; longer requests shrink proportionally (None: no cap)."""
    ingest_ms: float | None = None
    """Serial front-end (API server) time per request before the engine sees it, in arrival
    order (None: the engine's default, 2.0 for vllm_v1 and 0 for Vidur's schedulers;
    config/engine.py). TTFT and end-to-end latency count from the arrival (the client's send)."""
    ingest_us_per_token: float = 0.0
    """Front-end time per prompt token (tokenization), added to ingest_ms."""
    response_ms: float | None = None
    """Latency from the engine emitting a token to the client receiving it, added to TTFT and
    end-to-end latency (None: the engine's default, 1.0 for vllm_v1 and 0 for Vidur's)."""


@dataclass(frozen=True)
class ClosedLoopWorkload:
    """N concurrent clients: each sends its next request when its previous one
    completes (plus an optional think time), like `vllm bench
    serve --max-concurrency N`. Arrival times are known only during the run;
    metrics
    cover the requests of the measurement window."""

    concurrency: int = 8
    """Clients (requests in flight at most), >= 1."""
    num_requests: int = 1000
    """Requests sent in all (the clients share them in release order)."""
    duration_s: float | None = None
    """Stop sending new requests after this time (s); None: send all num_requests."""
    lengths: LengthGenerator = FixedLengths()
    """Prompt/output length generator (fixed or sampled per request)."""
    think_time_s: float = 0.0
    """Gap between a completion and the client's next request (mean when exponential)."""
    think_time: Literal["fixed", "exponential"] = "fixed"
    """Think-time distribution."""
    ramp_up_s: float = 0.0
    """Client c sends its first request at c * ramp_up_s / concurrency (0: all at t = 0)."""
    warmup_requests: int = 0
    """Leave the first K requests (in release order) out of the metrics."""
    warmup_s: float = 0.0
    """Leave requests arriving before this time out of the metrics."""
    measure_s: float | None = None
    """Count only requests arriving in [warmup_s, warmup_s + measure_s) (None: no end)."""
    max_tokens: int | None = None
    """Cap on prompt + output tokens; longer requests shrink proportionally (None: no cap)."""
    ingest_ms: float | None = None
    """Serial front-end (API server) time per request before the engine sees it (None: the
    engine's default, 2.0 for vllm_v1 and 0 for Vidur's schedulers; config/engine.py)."""
    ingest_us_per_token: float = 0.0
    """Front-end time per prompt token (tokenization), added to ingest_ms."""
    response_ms: float | None = None
    """Latency from the engine emitting a token to the client receiving it (added to TTFT and
    end-to-end latency; the client sends its next request only after its last token; None:
    the engine's default, 1.0 for vllm_v1 and 0 for Vidur's schedulers)."""
    prompt_pool: int = 0
    """Requests draw their prompt from this many distinct prompts, with replacement, as a load
    generator reusing its dataset entries does (aiperf: 100); repeated prompts hit the prefix
    cache. 0: every prompt distinct (workload/prompt_pool.py)."""


TraceFormat = Literal["auto", "vidur", "mooncake", "azure"]
ClipRule = Literal["proportional", "prompt", "error"]


@dataclass(frozen=True)
class TraceWorkload:
    """Replay a request trace: arrivals, lengths and (when present) sessions and
    prefix hashes."""

    path: str
    """Trace file (plain or .gz)."""
    format: TraceFormat = "auto"
    """vidur (CSV arrived_at,...), mooncake (JSONL), azure (CSV TIMESTAMP,...), or auto-detect."""
    num_requests: int | None = None
    """Use only the first N rows (after offset and the time window; None: all rows)."""
    offset: int = 0
    """Skip this many rows at the start of the file."""
    start_s: float | None = None
    """Keep rows whose arrival time in the file is at or after this (s; None: from the start)."""
    end_s: float | None = None
    """Keep rows whose arrival time in the file is before this (s; None: to the end)."""
    prefill_scale: float = 1.0
    """Multiply prompt lengths by this (then truncate, at least 1)."""
    decode_scale: float = 1.0
    """Multiply output lengths by this (then truncate, at least 1)."""
    time_scale: float = 1.0
    """Multiply arrival times by this (< 1 compresses the trace, i.e. raises the rate)."""
    max_tokens: int | None = None
    """Cap on prompt + output tokens per request (None: no cap)."""
    clip: ClipRule = "proportional"
    """Over max_tokens: shrink both proportionally, take the excess from the prompt, or fail."""
    start_at_zero: bool = False
    """Shift arrivals so that the first request arrives at t = 0."""
    ingest_ms: float | None = None
    """Serial front-end (API server) time per request before the engine sees it, in arrival
    order (None: the engine's default, 2.0 for vllm_v1 and 0 for Vidur's schedulers;
    config/engine.py). TTFT and end-to-end latency count from the arrival (the client's send)."""
    ingest_us_per_token: float = 0.0
    """Front-end time per prompt token (tokenization), added to ingest_ms."""
    response_ms: float | None = None
    """Latency from the engine emitting a token to the client receiving it, added to TTFT and
    end-to-end latency (None: the engine's default, 1.0 for vllm_v1 and 0 for Vidur's)."""


Workload = (
    Annotated[SyntheticWorkload, Subcommand("synthetic")]
    | Annotated[TraceWorkload, Subcommand("trace")]
    | Annotated[ClosedLoopWorkload, Subcommand("closed_loop")]
)
