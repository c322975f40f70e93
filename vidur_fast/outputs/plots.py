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
POOL_BINS = 200  # time bins of the per-pool utilisation and KV panels
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
    """p50/p90/p99 TTFT of each replica (requests it served; a disaggregated request
    counts with its prefill replica, where it queued and its prompt was computed)."""
    req = run.requests
    if "replica" not in req or len(req) == 0:
        return None
    done = req["completed"].to_numpy().astype(bool) if "completed" in req else slice(None)
    if "prefill_replica" in req:
        src = req["prefill_replica"].to_numpy(np.int64)
        req = req.assign(replica=np.where(src >= 0, src, req["replica"].to_numpy(np.int64)))
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


def _pool_names(run) -> list[str]:
    """Each pool's name as the trace names its track (`pool 0: prefill 2 x h100 tp1`)."""
    from vidur_fast.outputs.perfetto import pool_label

    n = int(run.replicas["pool"].max()) + 1
    pools = run.summary.get("pools") or []
    if len(pools) == n:
        return [pool_label(k, p) for k, p in enumerate(pools)]
    return [f"pool {k}" for k in range(n)]


def request_pools(run) -> tuple[np.ndarray, np.ndarray]:
    """(pool that computed each request's prompt, pool where it completed), -1 where none:
    a disaggregated request's prompt is computed on its prefill replica (`prefill_replica`),
    its output tokens, the first one included, on its decode replica (`replica`); otherwise
    both are `replica`'s pool."""
    req = run.requests
    rep_pool = run.replicas.set_index("replica")["pool"].sort_index().to_numpy(np.int64)
    rep = req["replica"].to_numpy(np.int64)
    done_pool = np.where(rep >= 0, rep_pool[np.maximum(rep, 0)], -1)
    first = rep
    if "prefill_replica" in req:
        src = req["prefill_replica"].to_numpy(np.int64)
        first = np.where(src >= 0, src, rep)
    first_pool = np.where(first >= 0, rep_pool[np.maximum(first, 0)], -1)
    return first_pool, done_pool


def _busy_in_bins(b0: np.ndarray, e0: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Busy time of one replica in each bin between edges; b0/e0: its stage-0 spans, in
    order and not overlapping."""
    n = b0.shape[0]
    if n == 0:
        return np.zeros(edges.shape[0] - 1)
    d = e0 - b0
    cum = np.concatenate([[0.0], np.cumsum(d)])
    k = np.searchsorted(e0, edges, side="right")  # spans over by each edge
    j = np.minimum(k, n - 1)
    partial = np.where(k < n, np.clip(edges - b0[j], 0.0, d[j]), 0.0)
    return np.diff(cum[k] + partial)


def _step_at(t: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """A step function sampled at `at`: the last value at or before (0 before the first)."""
    k = np.searchsorted(t, at, side="right") - 1
    return np.where(k >= 0, y[np.maximum(k, 0)], 0.0)


def plot_pools(run, path: Path, bins: int = POOL_BINS) -> Path | None:
    """Per pool: TTFT and TPOT CDFs (TTFT by the pool that computed the prompt, TPOT by the
    pool where the request completed), the share of its replicas' time a step was running
    and its mean KV-cache use over time. None for a one-pool run."""
    reps = run.replicas
    if "pool" not in reps or reps["pool"].nunique() < 2 or len(run.requests) == 0:
        return None
    from vidur_fast.outputs.perfetto import _spans_by_depth

    names = _pool_names(run)
    rep_pool = reps.set_index("replica")["pool"].sort_index().to_numpy(np.int64)
    first_pool, done_pool = request_pools(run)
    req = run.requests
    done = (
        req["completed"].to_numpy().astype(bool) if "completed" in req else np.ones(len(req), bool)
    )
    fig = Figure(figsize=(10, 7), dpi=90, layout="constrained")
    axes = fig.subplots(2, 2).ravel()
    cdfs = (
        (axes[0], "prefill_e2e_time", first_pool, "TTFT (s)", 1.0),
        (axes[1], "decode_time_execution_plus_preemption_normalized", done_pool, "TPOT (ms)", 1e3),
    )
    for ax, col, owner, label, scale in cdfs:
        if col in req:
            x_all = req[col].to_numpy(np.float64)
            for k, name in enumerate(names):
                x, p = sample_cdf(x_all[done & (owner == k)] * scale)
                if x.shape[0]:
                    ax.step(x, p, where="post", label=name, linewidth=1.4)
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3)
    b = run.batches
    if b is not None and len(b):
        begin, end = _spans_by_depth(b, np.asarray(run.replica_pp, dtype=np.int64))
        b0, e0 = begin[:, 0] / 1e9, end[:, 0] / 1e9
        rep_b = b["replica"].to_numpy(np.int64)
        hi = float(b["end_s"].max()) or 1.0
        edges = np.linspace(0.0, hi, bins + 1)
        centres = 0.5 * (edges[1:] + edges[:-1])
        busy = np.zeros((len(names), bins))
        kv = np.zeros((len(names), bins))
        by_rep = np.argsort(rep_b, kind="stable")
        cuts = np.searchsorted(rep_b[by_rep], np.arange(rep_pool.shape[0] + 1), side="left")
        for r in range(rep_pool.shape[0]):
            rows = by_rep[cuts[r] : cuts[r + 1]]
            rows = rows[np.argsort(b0[rows], kind="stable")]
            busy[rep_pool[r]] += _busy_in_bins(b0[rows], e0[rows], edges)
            ts = run.timeseries.get(r)
            if ts is not None and len(ts) and "kv_usage_fraction" in ts:
                kv[rep_pool[r]] += _step_at(
                    ts["time_s"].to_numpy(np.float64),
                    ts["kv_usage_fraction"].to_numpy(np.float64),
                    centres,
                )
        count = np.bincount(rep_pool, minlength=len(names))[:, None]
        width = edges[1] - edges[0]
        for k, name in enumerate(names):
            axes[2].plot(centres, 100 * busy[k] / (width * count[k]), linewidth=0.9, label=name)
            axes[3].plot(centres, 100 * kv[k] / count[k], linewidth=0.9, label=name)
    axes[2].set_ylabel("step running (% of the pool's time)", fontsize=8)
    axes[3].set_ylabel("KV-cache use (%, pool mean)", fontsize=8)
    for ax in axes[2:]:
        ax.set_xlabel("simulated time (s)")
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=7, loc="upper right")
    fig.suptitle("Pools", fontsize=10)
    return _save(fig, path)


def plot_pd_transfers(run, path: Path, bins: int = SERIES_POINTS) -> Path | None:
    """KV transfers of a disaggregated run: transfer time CDF, bytes moved over time per
    link (one per prefill replica; the total above MAX_REPLICA_LINES links) and transfers
    in flight over time. None without transfers."""
    req = run.requests
    if "kv_transfer_start_at" not in req or "kv_transfer_end_at" not in req:
        return None
    st = req["kv_transfer_start_at"].to_numpy(np.float64)
    en = req["kv_transfer_end_at"].to_numpy(np.float64)
    ok = np.isfinite(st) & np.isfinite(en)
    if not ok.any():
        return None
    st, en = st[ok], en[ok]
    src = (
        req["prefill_replica"].to_numpy(np.int64)[ok]
        if "prefill_replica" in req
        else np.zeros(st.shape[0], np.int64)
    )
    nbytes = (
        req["kv_transfer_bytes"].to_numpy(np.float64)[ok]
        if "kv_transfer_bytes" in req
        else np.zeros(st.shape[0])
    )
    fig = Figure(figsize=(11, 3.4), dpi=90, layout="constrained")
    axes = fig.subplots(1, 3)
    x, p = sample_cdf((en - st) * 1e3)
    axes[0].step(x, p, where="post", linewidth=1.4)
    axes[0].ticklabel_format(axis="x", useOffset=False)
    if x[-1] - x[0] <= 1e-6 * abs(x[0]):  # all took the same time (no contention, one length)
        axes[0].set_xlim(0.9 * x[0], 1.1 * x[0] + 1e-9)
        axes[0].set_xticks([x[0]], [f"{x[0]:.4g}"])
    axes[0].set_xlabel("KV transfer time (ms)")
    axes[0].set_ylabel("fraction of transfers")
    axes[0].set_ylim(0, 1.01)
    links = np.unique(src)
    groups = [(f"link of replica {r}", src == r) for r in links.tolist()]
    if len(groups) > MAX_REPLICA_LINES:
        groups = [(f"all {len(groups)} links", np.ones(st.shape[0], bool))]
    for label, mine in groups:
        order = np.argsort(en[mine], kind="stable")
        t = en[mine][order]
        axes[1].step(t, np.cumsum(nbytes[mine][order]) / 1e9, where="post", label=label)
    axes[1].set_xlabel("simulated time (s)")
    axes[1].set_ylabel("bytes moved (GB, cumulative)")
    axes[1].legend(fontsize=7, loc="upper left")
    hi = float(en.max()) or 1.0
    centres = (np.arange(bins) + 0.5) * hi / bins
    in_flight = np.searchsorted(np.sort(st), centres, side="right") - np.searchsorted(
        np.sort(en), centres, side="right"
    )
    axes[2].plot(centres, in_flight, linewidth=0.9)
    axes[2].set_xlabel("simulated time (s)")
    axes[2].set_ylabel("transfers in flight")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("KV transfers (prefill to decode)", fontsize=10)
    return _save(fig, path)


def write_plots(run, out_dir: Path) -> list[Path]:
    """All single-run plots into out_dir (created); returns the files written (pools.png
    with several pools, pd_transfers.png for a disaggregated run)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [plot_latency_cdfs([run], out_dir / "latency_cdfs.png")]
    for fn, name in (
        (plot_timeseries, "timeseries.png"),
        (plot_replica_ttft, "replica_ttft.png"),
        (plot_pools, "pools.png"),
        (plot_pd_transfers, "pd_transfers.png"),
    ):
        p = fn(run, out_dir / name)
        if p is not None:
            written.append(p)
    return written
