"""PNG plots of one run or several (overlays): latency CDFs, per-replica time series, per-replica
TTFT. Matplotlib's object API on the Agg canvas (no pyplot state); big runs are downsampled."""

import warnings
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vidur_fast.outputs.schema import TIMESERIES_COLUMNS
from vidur_fast.outputs.timeseries import downsample

CDF_POINTS = 1000
SERIES_POINTS = 600
MAX_REPLICA_LINES = 8
# (title, request column or "tbt" for the histogram)
CDF_PANELS = (
    ("TTFT (s)", "prefill_e2e_time"),
    ("TBT (s)", "tbt"),
    ("E2E latency (s)", "request_e2e_time"),
    ("Scheduling delay (s)", "request_scheduling_delay"),
)
SERIES_PANELS = (
    ("batch_size", "batch size (requests)", 1.0),
    ("num_tokens", "tokens per batch", 1.0),
    ("kv_usage_fraction", "KV-cache use (%)", 100.0),
    ("waiting_requests", "waiting requests", 1.0),
    ("prefix_cache_hit_rate", "prefix-cache hit rate (%)", 100.0),
)
# kept in the time-series tables but not drawn (the panels above cover them)
NOT_DRAWN = {"time_s", "num_prefill_tokens", "num_decode_tokens", "preemptions", "duration_s"}


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=fig.dpi, metadata={"Software": None})
    return path


def sample_cdf(x: np.ndarray, points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(values, cumulative fraction) of the finite values, at most `points` quantiles."""
    x = np.sort(x[np.isfinite(x)])
    if x.shape[0] == 0:
        return x, x
    p = np.arange(1, x.shape[0] + 1) / x.shape[0]
    if x.shape[0] > points:
        k = np.linspace(0, x.shape[0] - 1, points).round().astype(np.int64)
        return x[k], p[k]
    return x, p


def histogram_cdf(count: np.ndarray, upper_edge_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bucket upper edges, cumulative fraction) over the non-empty histogram buckets."""
    total = count.sum()
    nz = np.nonzero(count)[0]
    if total == 0:
        return np.zeros(0), np.zeros(0)
    return upper_edge_s[nz], np.cumsum(count)[nz] / total


def _completed(run, column: str) -> np.ndarray:
    req = run.requests
    if column not in req:
        return np.zeros(0)
    x = req[column].to_numpy(dtype=np.float64)
    if "completed" in req:
        x = x[req["completed"].to_numpy().astype(bool)]
    return x


def plot_latency_cdfs(runs: list, path: Path) -> Path:
    """2x2 CDFs of TTFT, TBT, E2E and scheduling delay; one line per run."""
    fig = Figure(figsize=(9, 6.5), dpi=90, layout="constrained")
    axes = fig.subplots(2, 2).ravel()
    for ax, (title, col) in zip(axes, CDF_PANELS, strict=True):
        for run in runs:
            if col == "tbt":
                x, p = histogram_cdf(run.tbt_histogram, run.tbt_upper_edge_s)
            else:
                x, p = sample_cdf(_completed(run, col))
            if x.shape[0]:
                ax.step(x, p, where="post", label=run.name, linewidth=1.4)
        ax.set_xlabel(title)
        ax.set_ylabel("fraction of requests" if col != "tbt" else "fraction of tokens")
        if col == "tbt":
            ax.set_xscale("log")  # log-bucket histogram; the tail spans decades
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3)
    if len(runs) > 1:
        axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(
        "Latency CDFs"
        if len(runs) == 1
        else "Latency CDFs (" + ", ".join(r.name for r in runs) + ")",
        fontsize=10,
    )
    return _save(fig, path)


def _series_panels(timeseries: dict) -> list[tuple[str, str, float]]:
    cols = set()
    for frame in timeseries.values():
        cols.update(frame.columns)
    panels = [p for p in SERIES_PANELS if p[0] in cols]
    extra = sorted(cols - set(TIMESERIES_COLUMNS) - NOT_DRAWN)
    return panels + [(c, c, 1.0) for c in extra]


def _binned(t, y, lo, width, nbins) -> np.ndarray:
    k = np.clip(((t - lo) / width).astype(np.int64), 0, nbins - 1)
    cnt = np.bincount(k, minlength=nbins)
    tot = np.bincount(k, weights=y, minlength=nbins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def plot_timeseries(run, path: Path, max_points: int = SERIES_POINTS) -> Path | None:
    """Per-replica batch size, tokens per batch, KV use, waiting requests (and prefix-cache hit
    rate and any extra batch-log column) over time. Above MAX_REPLICA_LINES replicas: the
    mean over replicas with a min-max band."""
    ts = {r: f for r, f in run.timeseries.items() if len(f)}
    if not ts:
        return None
    panels = _series_panels(ts)
    fig = Figure(figsize=(9, 1.9 * len(panels) + 0.6), dpi=90, layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(panels), 1, sharex=True))
    many = len(ts) > MAX_REPLICA_LINES
    lo = min(float(f["time_s"].iloc[0]) for f in ts.values())
    hi = max(float(f["time_s"].iloc[-1]) for f in ts.values())
    nbins = max_points
    width = (hi - lo) / nbins or 1.0
    centres = lo + (np.arange(nbins) + 0.5) * width
    for ax, (col, label, scale) in zip(axes, panels, strict=True):
        if many:
            grid = np.vstack(
                [
                    _binned(f["time_s"].to_numpy(), f[col].to_numpy(np.float64), lo, width, nbins)
                    for f in ts.values()
                    if col in f
                ]
            )
            with warnings.catch_warnings():
                # bins where no replica formed a batch stay NaN (gaps in the line)
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(grid, axis=0) * scale
                band = np.nanmin(grid, axis=0) * scale, np.nanmax(grid, axis=0) * scale
            ax.fill_between(centres, *band, alpha=0.25, linewidth=0, label="min-max")
            ax.plot(centres, mean, linewidth=1.0, label=f"mean of {len(ts)} replicas")
        else:
            for r, f in ts.items():
                if col not in f:
                    continue
                t, y = downsample(f["time_s"].to_numpy(), f[col].to_numpy(np.float64), max_points)
                ax.plot(t, y * scale, linewidth=0.8, drawstyle="steps-post", label=f"replica {r}")
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper right", ncols=min(len(ts), 4) if not many else 2)
    axes[-1].set_xlabel("simulated time (s)")
    return _save(fig, path)


def plot_replica_ttft(run, path: Path) -> Path | None:
    """p50/p90/p99 TTFT of each replica (requests it served)."""
    req = run.requests
    if "replica" not in req or len(req) == 0:
        return None
    done = req["completed"].to_numpy().astype(bool) if "completed" in req else slice(None)
    sub = req.loc[done, ["replica", "prefill_e2e_time"]].dropna()
    if len(sub) == 0:
        return None
    q = sub.groupby("replica")["prefill_e2e_time"].quantile([0.5, 0.9, 0.99]).unstack()
    fig = Figure(figsize=(max(5, min(12, 0.35 * len(q) + 3)), 3.4), dpi=90, layout="constrained")
    ax = fig.subplots()
    for quant, marker in ((0.5, "o"), (0.9, "s"), (0.99, "^")):
        ax.plot(q.index, q[quant], marker=marker, linestyle="none", label=f"p{round(quant * 100)}")
    ax.set_xlabel("replica")
    ax.set_ylabel("TTFT (s)")
    ax.set_xticks(q.index if len(q) <= 32 else q.index[:: max(1, len(q) // 16)])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("TTFT per replica", fontsize=10)
    return _save(fig, path)


def write_plots(run, out_dir: Path) -> list[Path]:
    """All single-run plots into out_dir (created); returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [plot_latency_cdfs([run], out_dir / "latency_cdfs.png")]
    for fn, name in ((plot_timeseries, "timeseries.png"), (plot_replica_ttft, "replica_ttft.png")):
        p = fn(run, out_dir / name)
        if p is not None:
            written.append(p)
    return written
