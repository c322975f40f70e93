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
from vidur_fast.config.engine import resolve_engine
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.sim import (
    ClusterConfig,
    DpLoadBalanceRouter,
    KVTransferConfig,
    PoolConfig,
    RoundRobinRouter,
    SimConfig,
    VllmV1Scheduler,
)
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
# First vLLM release whose engine schedules asynchronously by default (vllm-project/vllm#27614).
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
    scheduler: VllmV1Scheduler = field(default_factory=VllmV1Scheduler)
    """vLLM engine settings (defaults: the vllm_v1 scheduler's, i.e. `vllm serve`'s on an 80 GB
    GPU, one request in prefill per step, async scheduling). Rows measured on a vLLM older
    than 0.12 (backend_version) run with a synchronous engine loop, vLLM's default there."""
    predictor: PredictorConfig = field(default_factory=PredictorConfig)
    """Timing model (default: simulate's, i.e. aiconfigurator's measured vLLM kernels with the
    fastest-kernel envelope and the vllm_v1 engine's sampler terms, docs/validation.md)."""
    memory_margin_fraction: float = 0.1
    """GPU memory outside the engine's budget (vLLM gpu_memory_utilization 0.9)."""
    ingest_ms: float | None = None
    """Serial front-end (API server) time per request before the engine sees it (None: the
    vllm_v1 engine's default, config/engine.py)."""
    ingest_us_per_token: float = 0.0
    """Front-end time per prompt token (tokenization)."""
    response_ms: float | None = None
    """Engine -> client latency of each streamed token (None: the engine's default)."""
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


def async_scheduling_by_default(version: str) -> bool:
    """Whether vLLM `version` runs async scheduling by default (0.12 on; unknown: newest)."""
    parts = version.strip().lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return True
    return (major, minor) >= ASYNC_SCHEDULING_SINCE


def _moe_settings(row: BenchRow) -> dict:
    """Expert and attention-DP split of a MoE row (nothing for a dense one)."""
    if row.attention_dp == 1 and row.moe_ep == 1:
        return {}
    return {"attention_dp": row.attention_dp, "moe_ep": row.moe_ep}


def _pd_cluster(row: BenchRow, device: str, cfg: ValidateConfig) -> ClusterConfig:
    """The prefill and decode pools of a disaggregated row: each worker's attention-DP ranks
    are replicas of its pool (they schedule on their own and step in lockstep, as in the
    aggregated case), each pool with its own expert split; KV moves over the link the
    prefill pool's node gives (its inter-node network: NIXL over RDMA)."""
    pd = row.pd
    moe = get_model(row.model).moe is not None
    pools = tuple(
        PoolConfig(
            device=device,
            tp=s.tp,
            pp=s.pp,
            num_replicas=s.workers * s.attention_dp,
            role=role,
            # each pool's own expert split (a dense model has none)
            attention_dp=s.attention_dp if moe else None,
            moe_ep=s.moe_ep if moe else None,
        )
        for role, s in (("prefill", pd.prefill), ("decode", pd.decode))
    )
    # the rows do not say which workers share a node: every transfer crosses the network
    return ClusterConfig(
        model=row.model,
        pools=pools,
        memory_margin_fraction=cfg.memory_margin_fraction,
        kv_transfer=KVTransferConfig(placement="separate_nodes"),
    )


# scheduler settings the prefill/decode flow may refuse (config/validate.py validate_pd)
PD_REFUSABLE = ("async_scheduling", "enable_prefix_caching")


def pd_engine_settings(sim: SimConfig) -> tuple[SimConfig, tuple[str, ...]]:
    """A disaggregated row's config with the scheduler settings the prefill/decode flow
    refuses turned off (and which those were); the rest as the row states them."""
    from vidur_fast.config.validate import validate_pd

    off: list[str] = []
    while True:
        try:
            validate_pd(sim)
        except ConfigError as exc:
            name = next((n for n in PD_REFUSABLE if str(exc).startswith(f"scheduler.{n}:")), None)
            if name is None or name in off:
                raise
            off.append(name)
            sim = replace(sim, scheduler=replace(sim.scheduler, **{name: False}))
            continue
        return sim, tuple(off)


def row_config(row: BenchRow, cfg: ValidateConfig) -> SimConfig:
    """The simulation of one benchmark row (ConfigError says why it cannot be modelled)."""
    if row.mode not in ("", "agg", "disagg"):
        raise ConfigError(f"mode {row.mode!r}: only agg and disagg serving are modelled")
    if row.mode == "disagg" and row.pd is None:
        raise ConfigError("mode disagg: the row states no prefill/decode workers")
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
    # attention data parallelism: every DP rank is a replica, the ranks step in lockstep
    # (docs/timing_model.md, "Attention data parallelism") and vLLM's front end sends each
    # request to the least loaded rank (disaggregated: every rank of both pools is simulated)
    dp = max(1, row.attention_dp) if row.pd is None else 1
    concurrency = row.concurrency
    n_req = cfg.requests_per_client * concurrency
    if row.num_requests:
        n_req = row.num_requests
    warmup = cfg.warmup_requests_per_client * concurrency
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
        num_replicas=dp,
        memory_margin_fraction=cfg.memory_margin_fraction,
    )
    if row.pd is not None:
        cluster = _pd_cluster(row, device, cfg)
    kv_dtype = KV_DTYPES.get(row.kv_cache_dtype.lower())
    if kv_dtype is None:
        raise ConfigError(
            f"kv_cache_dtype {row.kv_cache_dtype!r}: modelled KV-cache dtypes are bf16, fp16, fp8"
        )
    scheduler = cfg.scheduler
    if not async_scheduling_by_default(row.backend_version):
        scheduler = replace(scheduler, async_scheduling=False)
    return resolve_engine(
        SimConfig(
            cluster=cluster,
            workload=ClosedLoopWorkload(
                concurrency=concurrency,
                num_requests=n_req,
                lengths=FixedLengths(prefill_tokens=row.isl, decode_tokens=row.osl),
                warmup_requests=warmup,
                ingest_ms=cfg.ingest_ms,
                ingest_us_per_token=cfg.ingest_us_per_token,
                response_ms=cfg.response_ms,
                think_time_s=cfg.client_jitter_ms / 1e3,
                think_time="exponential",
            ),
            scheduler=scheduler,
            # NOTE(vllm): the DP ranks of one engine are routed by its front end
            # (DPLBAsyncMPClient), the dp_lb router
            router=DpLoadBalanceRouter() if dp > 1 else RoundRobinRouter(),
            predictor=replace(
                cfg.predictor, precision=precision, kv_cache_dtype=kv_dtype, **_moe_settings(row)
            ),
            seed=cfg.seed,
            quiet=True,
        )
    )


def simulate_row(row: BenchRow, cfg: ValidateConfig) -> RowResult:
    from vidur_fast.api import simulate

    try:
        sim_cfg = row_config(row, cfg)
        if row.pd is not None:
            sim_cfg, _ = pd_engine_settings(sim_cfg)
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
