"""One self-contained HTML page for runs side by side, or for a sweep or capacity directory.

Everything is inside the file: styles inline, plots as PNG data URIs, so the page can be mailed
or archived. Run pages: what ran, key figures relative to the first run, latency CDFs (all runs
overlaid), and per run its time series (batch size, tokens, KV use, queue, prefix-cache hit
rate), batch composition (prompt vs decode tokens per batch), TTFT per replica and, with
several pools, the pool table and plots (and a disaggregated run's hand-offs and links). Sweep and
capacity pages: the results table and the Pareto chart.
"""

import base64
import html
import math
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vidur_fast import __version__
from vidur_fast.outputs.plots import (
    SERIES_POINTS,
    _binned,
    _save,
    plot_latency_cdfs,
    plot_pd_transfers,
    plot_pools,
    plot_replica_ttft,
    plot_timeseries,
)
from vidur_fast.outputs.pool_report import has_pool_views, link_table, pd_table, pool_table

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.05em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
tr.pareto td { background: #fff3e0; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.note { color: #666; font-size: 0.85em; }
.wide { overflow-x: auto; }
"""


def _img(path: Path | None) -> str:
    if path is None or not Path(path).is_file():
        return ""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img alt="{html.escape(Path(path).stem)}" src="data:image/png;base64,{data}">'


def _table(rows: list[list], head: list[str], classes: list[str] | None = None) -> str:
    out = ["<table><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in head) + "</tr>"]
    for k, row in enumerate(rows):
        cls = f' class="{classes[k]}"' if classes and classes[k] else ""
        out.append(
            f"<tr{cls}>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
        )
    out.append("</table>")
    return "\n".join(out)


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.4g}"
    return str(v)


def _page(title: str, body: list[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n" + "\n".join(body) + "\n"
        f'<p class="note">vidur-fast {__version__}</p></body></html>\n'
    )


def _run_header(label: str, summary: dict, config: dict) -> list:
    run = summary.get("run", {})
    cluster = config.get("cluster", {})
    layout = f"TP{run.get('tp', cluster.get('tp', '?'))} PP{run.get('pp', cluster.get('pp', '?'))}"
    if "attention_dp" in run:  # MoE: the DP ranks of an engine and the expert split
        layout += f" DP{run['attention_dp']} EP{run['moe_ep']}"
    return [
        label,
        run.get("model", cluster.get("model", "?")),
        run.get("device", cluster.get("device", "?")),
        layout,
        run.get("replicas", cluster.get("num_replicas", "?")),
        run.get("scheduler", config.get("scheduler", {}).get("type", "?")),
        run.get("router", config.get("router", {}).get("type", "?")),
        run.get("workload", config.get("workload", {}).get("type", "?")),
        summary.get("num_requests", "?"),
    ]


def plot_batch_composition(run, path: Path, bins: int = SERIES_POINTS) -> Path | None:
    """Mean prompt and decode tokens per batch over time (all replicas), stacked."""
    b = run.batches
    if b is None or len(b) == 0 or "num_prefill_tokens" not in b:
        return None
    t = b["start_s"].to_numpy(np.float64)
    lo, hi = float(t.min()), float(t.max())
    width = (hi - lo) / bins or 1.0
    centres = lo + (np.arange(bins) + 0.5) * width
    pre = _binned(t, b["num_prefill_tokens"].to_numpy(np.float64), lo, width, bins)
    dec = _binned(t, b["num_decode_tokens"].to_numpy(np.float64), lo, width, bins)
    fig = Figure(figsize=(9, 2.8), dpi=90, layout="constrained")
    ax = fig.subplots()
    ok = np.isfinite(pre) & np.isfinite(dec)
    ax.stackplot(centres[ok], dec[ok], pre[ok], labels=["decode tokens", "prompt tokens"])
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("tokens per batch (mean)")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def _figure_row(row: list[str], n_runs: int) -> list[str]:
    """A key-figure row as text: the values to 4 significant digits, differences in %."""
    values = [_fmt(_number(v)) for v in row[1 : 1 + n_runs]]
    diffs = [f"{_number(d):+.1f}%" if d else "-" for d in row[1 + n_runs :]]
    return [row[0], *values, *diffs]


def runs_page(runs: list, labels: list[str], figures: tuple[list[str], list[list[str]]]) -> str:
    """The page of one or more runs; figures: (header, rows) of the key-figure table."""
    head, rows = figures
    body = ["<h2>What ran</h2>"]
    body.append(
        _table(
            [_run_header(lab, r.summary, r.config) for lab, r in zip(labels, runs, strict=True)],
            [
                "run",
                "model",
                "device",
                "parallel",
                "replicas",
                "scheduler",
                "router",
                "workload",
                "requests",
            ],
        )
    )
    body.append("<h2>Key figures</h2>")
    if len(runs) > 1:
        body.append(
            f'<p class="note">Later runs show the difference to {html.escape(labels[0])}.</p>'
        )
    n = len(runs)
    body.append(_table([_figure_row(r, n) for r in rows], head))
    with tempfile.TemporaryDirectory(prefix="vidur-fast-html-") as tmp:
        d = Path(tmp)
        body.append("<h2>Latency distributions</h2>")
        body.append(_img(plot_latency_cdfs(runs, d / "cdfs.png")))
        for k, (label, run) in enumerate(zip(labels, runs, strict=True)):
            body.append(f"<h2>{html.escape(label)}</h2>")
            for title, fn in (
                (
                    "Per-replica time series (batch, tokens, KV use, queue, prefix-cache hits)",
                    plot_timeseries,
                ),
                ("Batch composition", plot_batch_composition),
                ("TTFT per replica", plot_replica_ttft),
            ):
                img = _img(fn(run, d / f"{k}_{fn.__name__}.png"))
                if img:
                    body += [f"<h3>{title}</h3>", img]
            body += _pool_section(run, d / f"{k}_")
            hit = run.summary.get("prefix_cache_hit_rate")
            if hit is not None:
                body.append(
                    f"<p>prefix-cache hit rate {100 * hit:.1f}% of prompt tokens looked up</p>"
                )
    title = "vidur-fast report: " + ", ".join(labels)
    return _page(title, body)


def _pool_section(run, prefix: Path) -> list[str]:
    """The pools of a run (table, per-pool CDFs and time series) and, for a disaggregated
    run, its KV hand-offs (figures, links, transfer plots); nothing for one pool."""
    summary = run.summary
    if not has_pool_views(summary):
        return []
    head, rows = pool_table(summary)
    body = ["<h3>Pools</h3>", f'<div class="wide">{_table(rows, head)}</div>']
    img = _img(plot_pools(run, Path(f"{prefix}pools.png")))
    if img:
        body.append(img)
    rows = pd_table(summary)
    if rows:
        body += ["<h3>Disaggregated serving (KV hand-offs)</h3>", _table(rows, ["", "value"])]
        head, links = link_table(summary)
        if links:
            body.append(_table(links, head))
        img = _img(plot_pd_transfers(run, Path(f"{prefix}pd_transfers.png")))
        if img:
            body.append(img)
    return body


def table_page(
    title: str,
    table: pd.DataFrame,
    images: list[Path],
    mark: str | None,
    note: str = "Highlighted: the cost-latency Pareto frontier.",
    lead: str | None = None,
) -> str:
    """A sweep or capacity directory: its results table (rows with `mark` true highlighted,
    e.g. the Pareto frontier, with `note` saying what they are) and its charts; `lead` is a
    line shown above the table (a capacity answer)."""
    body = [f"<p><b>{html.escape(lead)}</b></p>"] if lead else []
    body.append(f"<p>{len(table)} rows.</p>")
    classes = None
    if mark and mark in table:
        classes = ["pareto" if bool(v) else "" for v in table[mark]]
        body.append(f'<p class="note">{html.escape(note)}</p>')
    rows = table.astype(object).where(table.notna(), float("nan")).values.tolist()
    body.append(_table(rows, [str(c) for c in table.columns], classes))
    for image in images:
        body.append(_img(image))
    return _page(title, body)
