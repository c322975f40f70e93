"""Cost-latency Pareto frontier of deployments and its plot."""

from pathlib import Path

import numpy as np
import pandas as pd


def pareto_mask(latency: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """True for points no other point beats on both axes (lower is better on both).

    Points with a NaN coordinate are never on the frontier; exact duplicates all are.
    """
    latency = np.asarray(latency, dtype=float)
    cost = np.asarray(cost, dtype=float)
    ok = np.isfinite(latency) & np.isfinite(cost)
    mask = np.zeros(latency.shape, dtype=bool)
    idx = np.flatnonzero(ok)
    for i in idx:
        dominated = (
            (latency[idx] <= latency[i])
            & (cost[idx] <= cost[i])
            & ((latency[idx] < latency[i]) | (cost[idx] < cost[i]))
        )
        mask[i] = not dominated.any()
    return mask


def plot_pareto(
    df: pd.DataFrame,
    x: str,
    y: str,
    label: str,
    path: Path,
    title: str,
    xlabel: str | None = None,
    ylabel: str = "cost per million requests at capacity (USD)",
) -> None:
    """Scatter of every deployment (x: latency at capacity, y: cost), frontier highlighted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    valid = df[np.isfinite(df[x].astype(float)) & np.isfinite(df[y].astype(float))]
    front = valid[valid["pareto"]].sort_values(x)
    ax.scatter(valid[x], valid[y], s=24, color="0.6", label="deployments")
    ax.step(front[x], front[y], where="post", color="tab:red", lw=1.2)
    ax.scatter(front[x], front[y], s=36, color="tab:red", label="Pareto frontier", zorder=3)
    for _, r in front.iterrows():
        ax.annotate(
            str(r[label]), (r[x], r[y]), fontsize=7, xytext=(4, 4), textcoords="offset points"
        )
    ax.set_xlabel(xlabel or f"{x} at capacity (s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}")
    fig.savefig(tmp, format="png")
    plt.close(fig)
    tmp.replace(path)
