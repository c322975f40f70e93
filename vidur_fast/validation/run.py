"""`vidur-fast validate`: simulate measured serving benchmarks and report the errors.

Each CSV row (docs/validation.md) is one closed-loop benchmark on one replica; it is simulated
with the closed-loop workload and the vLLM v1 scheduler, and the mean TTFT and mean TPOT (as
`vllm bench serve` defines them) are compared with the measured ones. Rows the simulator
cannot model are listed with the reason.
"""

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from vidur_fast.catalog import get_device, get_model, list_devices
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.sim import ClusterConfig, SimConfig, VllmV1Scheduler
from vidur_fast.config.workload import ClosedLoopWorkload, FixedLengths
from vidur_fast.errors import ConfigError, UserError
from vidur_fast.validation.bench_csv import BenchRow, read_bench_csv

GEMM_PRECISIONS = {
    "": "bf16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "fp4": "nvfp4",
}
KV_DTYPES = {
    "": "bf16",
    "auto": "bf16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
}
SUPPORTED_BACKENDS = ("", "vllm")
# Host overhead of one engine step of vLLM's synchronous loop (schedule, prepare inputs, sample,
# process outputs): a fixed part and a part per request in the batch. Estimated from decode-step
# times isolated by pairs of benchmarks that differ only in output length (docs/validation.md);
# re-derived on the fastest-kernel envelope of the GEMM and all-reduce tables (1.15 + 0.038
# before it).
HOST_STEP_MS = 1.42
HOST_PER_SEQ_MS = 0.040
# Host time to launch one layer's kernels in a step that runs outside CUDA graphs (vLLM replays
# graphs for decode-sized batches; a step carrying prefill tokens is launched kernel by kernel),
# so such a step lasts at least this much per layer. Calibrated on the Qwen3-32B H100 rows (the
# value of lowest TTFT MAPE over 0 ... 0.7 in steps of 0.05-0.2; docs/validation.md).
EAGER_LAUNCH_MS_PER_LAYER = 0.45
# Largest batch vLLM (>= 0.11) captures piecewise CUDA graphs for by default; mixed batches up
# to this size replay them and are exempt from the launch floor.
GRAPH_MAX_TOKENS = 512
# First vLLM release whose engine schedules one step ahead by default (async scheduling).
ASYNC_SCHEDULING_SINCE = (0, 12)


@dataclass(frozen=True)
class ValidateConfig:
    """Simulate each row of a benchmark CSV and compare mean TTFT and TPOT with it."""

    csv: str
    """Benchmark CSV (columns in docs/validation.md)."""
    plot: str | None = None
    """Write a simulated-vs-measured scatter plot (PNG) here."""
    out: str | None = None
    """Write the per-row results as CSV here."""
    rows: str | None = None
    """Only these data rows (0-based), e.g. '0,5,10-12'."""
    requests_per_client: int = 10
    """Requests sent per client when the CSV has no num_requests column."""
    warmup_requests_per_client: int = 0
    """Leave the first K x concurrency requests out of the means (0: every request counts,
    as `vllm bench serve` does)."""
    scheduler: VllmV1Scheduler = field(
        default_factory=lambda: VllmV1Scheduler(
            max_num_batched_tokens=8192, max_num_seqs=1024, max_num_partial_prefills=1
        )
    )
    """vLLM engine settings (defaults: vLLM's for an OpenAI server on an 80 GB GPU, one
    request in prefill per step)."""
    predictor: PredictorConfig = field(
        default_factory=lambda: PredictorConfig(
            cpu_overhead_ms=HOST_STEP_MS,
            cpu_overhead_per_seq_ms=HOST_PER_SEQ_MS,
            eager_launch_ms_per_layer=EAGER_LAUNCH_MS_PER_LAYER,
            graph_max_tokens=GRAPH_MAX_TOKENS,
        )
    )
    """Timing model (default: aiconfigurator's measured vLLM kernels plus the host overhead
    of vLLM's synchronous engine loop, docs/validation.md)."""
    memory_margin_fraction: float = 0.1
    """GPU memory outside the engine's budget (vLLM gpu_memory_utilization 0.9)."""
    ingest_ms: float = 2.0
    """Serial front-end (API server) time per request before the engine sees it."""
    ingest_us_per_token: float = 0.0
    """Front-end time per prompt token (tokenization)."""
    response_ms: float = 1.0
    """Engine -> client latency of each streamed token."""
    schedule_ahead: bool = True
    """Model vLLM's async scheduling (step k+1 formed while step k runs; on by default since
    vLLM 0.12): a request reaching the engine during a step joins the step after next. Rows
    measured on an older vLLM (backend_version < 0.12) always run without it."""
    client_jitter_ms: float = 0.0
    """Mean of an exponential delay between a client receiving its last token and sending
    its next request (client event-loop and connection handling; 0 = none)."""
    seed: int = 0
    """Seed of the simulations."""
    quiet: bool = False
    """Print only the aggregate lines."""


@dataclass(frozen=True)
class RowResult:
    row: BenchRow
    sim_ttft_ms: float = math.nan
    sim_tpot_ms: float = math.nan
    skipped: str = ""
    """Why the row could not be simulated ("" when it was)."""
    summary: dict | None = None


def _parse_rows(spec: str | None, n: int) -> list[int]:
    if spec is None:
        return list(range(n))
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        try:
            lo, _, hi = part.partition("-")
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise ConfigError(f"rows: expected indices like '0,5,10-12' (got {spec!r})") from None
        if not 0 <= a <= b < n:
            raise ConfigError(f"rows: {part!r} is outside 0..{n - 1}")
        out.extend(range(a, b + 1))
    return out


def resolve_device(name: str) -> str:
    """Catalog device for a CSV device name: a catalog name or an aiconfigurator system name."""
    devices = list_devices()
    if name in devices:
        return name
    for d in devices:
        if get_device(d).aiconfigurator_system == name:
            return d
    raise ConfigError(f"unknown device {name!r}; known: {', '.join(devices)}")


def schedules_ahead_by_default(version: str) -> bool:
    """Whether vLLM `version` runs async scheduling by default (0.12 on; unknown: newest)."""
    parts = version.strip().lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return True
    return (major, minor) >= ASYNC_SCHEDULING_SINCE


def row_config(row: BenchRow, cfg: ValidateConfig) -> SimConfig:
    """The simulation of one benchmark row (ConfigError says why it cannot be modelled)."""
    if row.mode not in ("", "agg"):
        raise ConfigError(f"mode {row.mode!r}: only aggregated serving (agg) is modelled")
    if row.backend.lower() not in SUPPORTED_BACKENDS:
        raise ConfigError(
            f"backend {row.backend!r}: only vllm is modelled (vLLM v1 scheduler and kernels)"
        )
    precision = GEMM_PRECISIONS.get(row.precision.lower())
    if precision is None:
        raise ConfigError(
            f"precision {row.precision!r}: modelled precisions are bf16, fp16, fp8, fp8_block, "
            "nvfp4"
        )
    get_model(row.model)
    device = resolve_device(row.device)
    n_req = row.num_requests or cfg.requests_per_client * row.concurrency
    warmup = cfg.warmup_requests_per_client * row.concurrency
    if warmup >= n_req:
        raise ConfigError(
            f"warmup_requests_per_client: {cfg.warmup_requests_per_client} leaves no request "
            f"of {n_req} to measure"
        )
    cluster = ClusterConfig(
        model=row.model,
        device=device,
        tp=row.tp,
        pp=row.pp,
        memory_margin_fraction=cfg.memory_margin_fraction,
        memory_model="vllm",
    )
    kv_dtype = KV_DTYPES.get(row.kv_cache_dtype.lower())
    if kv_dtype is None:
        raise ConfigError(
            f"kv_cache_dtype {row.kv_cache_dtype!r}: modelled KV-cache dtypes are bf16, fp16, fp8"
        )
    return SimConfig(
        cluster=cluster,
        workload=ClosedLoopWorkload(
            concurrency=row.concurrency,
            num_requests=n_req,
            lengths=FixedLengths(prefill_tokens=row.isl, decode_tokens=row.osl),
            warmup_requests=warmup,
            ingest_ms=cfg.ingest_ms,
            ingest_us_per_token=cfg.ingest_us_per_token,
            response_ms=cfg.response_ms,
            schedule_ahead=cfg.schedule_ahead and schedules_ahead_by_default(row.backend_version),
            think_time_s=cfg.client_jitter_ms / 1e3,
            think_time="exponential",
        ),
        scheduler=cfg.scheduler,
        predictor=replace(cfg.predictor, precision=precision, kv_cache_dtype=kv_dtype),
        seed=cfg.seed,
        quiet=True,
    )


def simulate_row(row: BenchRow, cfg: ValidateConfig) -> RowResult:
    from vidur_fast.api import simulate

    try:
        sim_cfg = row_config(row, cfg)
        res = simulate(sim_cfg)
    except UserError as exc:
        return RowResult(row, skipped=str(exc).splitlines()[0])
    cl = res.summary["closed_loop"]
    if cl["ttft"].get("count", 0) == 0:
        return RowResult(row, skipped="no request completed in the measurement window")
    tpot = cl["tpot"].get("mean", math.nan) if cl["tpot"].get("count", 0) else math.nan
    return RowResult(row, 1e3 * cl["ttft"]["mean"], 1e3 * tpot, "", res.summary)


def results_frame(results: list[RowResult]) -> pd.DataFrame:
    recs = []
    for r in results:
        b = r.row
        recs.append(
            {
                "row": b.index,
                "id": b.id,
                "model": b.model,
                "device": b.device,
                "tp": b.tp,
                "pp": b.pp,
                "concurrency": b.concurrency,
                "isl": b.isl,
                "osl": b.osl,
                "measured_ttft_ms": b.ttft_ms,
                "sim_ttft_ms": r.sim_ttft_ms,
                "ttft_err_pct": 100 * (r.sim_ttft_ms - b.ttft_ms) / b.ttft_ms,
                "measured_tpot_ms": b.tpot_ms,
                "sim_tpot_ms": r.sim_tpot_ms,
                "tpot_err_pct": 100 * (r.sim_tpot_ms - b.tpot_ms) / b.tpot_ms,
                "skipped": r.skipped,
            }
        )
    return pd.DataFrame(recs)


def aggregate(df: pd.DataFrame) -> dict:
    """MAPE, signed bias, median and worst absolute error (%) of TTFT and TPOT."""
    ok = df[df["skipped"] == ""]
    out: dict = {"rows": int(len(df)), "simulated": int(len(ok)), "skipped": int(len(df) - len(ok))}
    for m in ("ttft", "tpot"):
        e = ok[f"{m}_err_pct"].to_numpy(dtype=np.float64)
        e = e[np.isfinite(e)]
        if e.size == 0:
            out[m] = {"count": 0}
            continue
        out[m] = {
            "count": int(e.size),
            "mape_pct": float(np.mean(np.abs(e))),
            "bias_pct": float(np.mean(e)),
            "median_ape_pct": float(np.median(np.abs(e))),
            "max_ape_pct": float(np.max(np.abs(e))),
        }
    return out


def format_report(df: pd.DataFrame, agg: dict, per_row: bool = True) -> str:
    lines = []
    ok = df[df["skipped"] == ""]
    if per_row and len(ok):
        lines.append(
            f"{'row':>4} {'tp':>3} {'conc':>5} {'isl':>6} {'osl':>6} "
            f"{'ttft meas':>10} {'sim':>10} {'err%':>7}  {'tpot meas':>9} {'sim':>8} {'err%':>7}"
        )
        for r in ok.itertuples(index=False):
            lines.append(
                f"{r.row:>4} {r.tp:>3} {r.concurrency:>5} {r.isl:>6} {r.osl:>6} "
                f"{r.measured_ttft_ms:>10.1f} {r.sim_ttft_ms:>10.1f} {r.ttft_err_pct:>+7.1f}  "
                f"{r.measured_tpot_ms:>9.2f} {r.sim_tpot_ms:>8.2f} {r.tpot_err_pct:>+7.1f}"
            )
    for r in df[df["skipped"] != ""].itertuples(index=False):
        lines.append(f"not simulated: row {r.row} ({r.id}): {r.skipped}")
    lines.append(
        f"rows {agg['rows']}: simulated {agg['simulated']}, not simulated {agg['skipped']}"
    )
    for m, label in (("ttft", "mean TTFT"), ("tpot", "mean TPOT")):
        a = agg[m]
        if a.get("count"):
            lines.append(
                f"{label}: MAPE {a['mape_pct']:.1f}%  bias {a['bias_pct']:+.1f}%  "
                f"median APE {a['median_ape_pct']:.1f}%  max APE {a['max_ape_pct']:.1f}%"
            )
    return "\n".join(lines)


def write_plot(df: pd.DataFrame, path: str | Path) -> None:
    """Two log-log scatter panels (TTFT, TPOT) of simulated vs measured, with y = x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = df[df["skipped"] == ""]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    for ax, m, label in ((axes[0], "ttft", "mean TTFT (ms)"), (axes[1], "tpot", "mean TPOT (ms)")):
        x = ok[f"measured_{m}_ms"].to_numpy(dtype=np.float64)
        y = ok[f"sim_{m}_ms"].to_numpy(dtype=np.float64)
        good = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
        sc = ax.scatter(x[good], y[good], c=ok["tp"].to_numpy()[good], cmap="viridis", s=18)
        if good.any():
            lo = min(x[good].min(), y[good].min()) * 0.8
            hi = max(x[good].max(), y[good].max()) * 1.25
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"simulated {label}")
        e = ok[f"{m}_err_pct"].to_numpy(dtype=np.float64)
        e = e[np.isfinite(e)]
        if e.size:
            ax.set_title(f"MAPE {np.mean(np.abs(e)):.1f}%, bias {np.mean(e):+.1f}%")
        fig.colorbar(sc, ax=ax, label="TP")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_validation(cfg: ValidateConfig, progress=None) -> tuple[pd.DataFrame, dict]:
    """Simulate the selected rows; returns the per-row frame and the aggregate errors."""
    if cfg.requests_per_client < 1:
        raise ConfigError(f"requests_per_client: must be >= 1 (got {cfg.requests_per_client})")
    if cfg.warmup_requests_per_client < 0:
        raise ConfigError(
            f"warmup_requests_per_client: must be >= 0 (got {cfg.warmup_requests_per_client})"
        )
    rows = read_bench_csv(cfg.csv)
    results = []
    for k in _parse_rows(cfg.rows, len(rows)):
        results.append(simulate_row(rows[k], cfg))
        if progress is not None:
            progress(results[-1])
    df = results_frame(results)
    return df, aggregate(df)
