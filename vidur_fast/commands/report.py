"""`vidur-fast report RUN [RUN ...]`: key figures of run directories side by side, relative to
the first run, the pool tables of runs with several pools, plus plots (CDF overlays; the full
plot set for a single run)."""

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from vidur_fast.errors import RunDirError
from vidur_fast.outputs.reader import read_run, read_summary

# (row label, summary key, field in that entry or None for a scalar, scale)
ROWS = (
    ("completed requests", "num_completed", None, 1.0),
    ("throughput (req/s)", "throughput_requests_per_s", None, 1.0),
    ("output tokens/s", "throughput_output_tokens_per_s", None, 1.0),
    ("TTFT p50 (s)", "prefill_e2e_time", "p50", 1.0),
    ("TTFT p90 (s)", "prefill_e2e_time", "p90", 1.0),
    ("TTFT p99 (s)", "prefill_e2e_time", "p99", 1.0),
    ("TBT p50 (ms)", "tbt", "p50", 1e3),
    ("TBT p90 (ms)", "tbt", "p90", 1e3),
    ("TBT p99 (ms)", "tbt", "p99", 1e3),
    ("E2E p50 (s)", "request_e2e_time", "p50", 1.0),
    ("E2E p90 (s)", "request_e2e_time", "p90", 1.0),
    ("E2E p99 (s)", "request_e2e_time", "p99", 1.0),
    ("sched. delay p50 (s)", "request_scheduling_delay", "p50", 1.0),
    ("sched. delay p99 (s)", "request_scheduling_delay", "p99", 1.0),
    ("TPOT p50 (ms)", "decode_time_execution_plus_preemption_normalized", "p50", 1e3),
    ("TPOT p99 (ms)", "decode_time_execution_plus_preemption_normalized", "p99", 1e3),
    ("preemptions", "num_preemptions", None, 1.0),
    ("mean running batch", "running_batch_mean", None, 1.0),
    ("batch fill (%)", "batch_fill_mean", None, 100.0),
    ("KV use mean (%)", "kv_usage_mean", None, 100.0),
    ("prefix hit rate (%)", "prefix_cache_hit_rate", None, 100.0),
    ("step running (%)", "busy_fraction_mean", None, 100.0),
    ("cost per 1k req ($)", "cost_per_1k_requests_usd", None, 1.0),
)


@dataclass(frozen=True)
class ReportArgs:
    """Compare run directories: a table of key figures (differences relative to the
    first run) and plots."""

    runs: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="RUN")] = ()
    """Run directories (each with summary.json; metrics.h5 for plots). The first is the base."""
    out: str | None = None
    """Directory for the plots and report.csv (none: the table is only printed)."""
    plots: bool = True
    """Write plots (needs metrics.h5 in every run)."""
    html: str | None = None
    """Write one self-contained HTML page here instead (config, key figures, CDFs, time series,
    batch composition, prefix-cache hits, pools and KV hand-offs per run; for a sweep or
    capacity directory its results table and Pareto chart). Nothing else is written unless
    --out is given too."""


def _value(summary: dict, key: str, sub: str | None, scale: float) -> float:
    v = summary.get(key)
    if sub is not None:
        v = v.get(sub) if isinstance(v, dict) else None
    if v is None or isinstance(v, (dict, list, str)):
        return math.nan
    return float(v) * scale


def relative_diff(value: float, base: float) -> float:
    """(value - base) / base; NaN when base is 0 (unless both are 0) or missing."""
    if math.isnan(value) or math.isnan(base):
        return math.nan
    if base == 0:
        return 0.0 if value == 0 else math.nan
    return (value - base) / abs(base)


def _labels(paths: list[Path]) -> list[str]:
    names = [p.resolve().name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [f"{i}:{n}" for i, n in enumerate(names)]


def _cell(v: float) -> str:
    if math.isnan(v):
        return "-"
    if v == int(v) and abs(v) >= 1000:
        return f"{int(v)}"
    return f"{v:.4g}"


def comparison_table(summaries: list[dict], labels: list[str]) -> tuple[str, list[list[str]]]:
    """(text table, csv rows) of ROWS for each run; later runs carry the difference to the first."""
    width = max(20, *(len(lab) + 12 for lab in labels))
    head = f"{'metric':<22}" + "".join(f"{lab:>{width}}" for lab in labels)
    lines = [head, "-" * len(head)]
    csv_rows = [["metric", *labels, *(f"{lab} vs {labels[0]} (%)" for lab in labels[1:])]]
    for label, key, sub, scale in ROWS:
        vals = [_value(s, key, sub, scale) for s in summaries]
        if all(math.isnan(v) for v in vals):
            continue
        cells, rels = [_cell(vals[0])], []
        for v in vals[1:]:
            rel = relative_diff(v, vals[0])
            rels.append(rel)
            tag = "" if math.isnan(rel) else f" ({100 * rel:+.1f}%)"
            cells.append(_cell(v) + tag)
        lines.append(f"{label:<22}" + "".join(f"{c:>{width}}" for c in cells))
        csv_rows.append(
            [
                label,
                *(repr(v) for v in vals),
                *("" if math.isnan(r) else f"{100 * r:.3f}" for r in rels),
            ]
        )
    return "\n".join(lines), csv_rows


def pools_text(summaries: list[dict], labels: list[str]) -> str:
    """The pool tables (and disaggregated-serving blocks) of the runs that have them, each
    after a blank line; empty when no run has several pools."""
    from vidur_fast.outputs.pool_report import format_pools

    parts = [format_pools(s, lab) for s, lab in zip(summaries, labels, strict=True)]
    return "".join(f"\n\n{p}" for p in parts if p)


def _sweep_kind(path: Path) -> str | None:
    """'sweep' or 'capacity' for a directory those commands wrote, else None."""
    import json

    from vidur_fast.explore.store import MARKER

    marker = path / MARKER
    if not marker.is_file():
        return None
    try:
        return json.loads(marker.read_text()).get("kind")
    except (OSError, ValueError):
        raise RunDirError(f"{path}: {MARKER} is damaged") from None


def _check_html_target(target: Path) -> None:
    if target.is_dir():
        raise RunDirError(f"--html: {target} is a directory; give a file name")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise RunDirError(f"--html: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise RunDirError(f"--html: cannot write in {parent}")


def _write_html(target: Path, text: str) -> None:
    try:
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, target)
    except OSError as exc:
        raise RunDirError(f"--html: cannot write {target} ({exc.strerror})") from None
    print(f"html report: {target}")


def sweep_html(path: Path, kind: str, target: Path) -> int:
    """The page of a sweep or capacity directory."""
    import pandas as pd

    from vidur_fast.outputs.html_report import table_page

    stem = "results" if kind == "sweep" else "capacity"
    table_file = path / f"{stem}.parquet"
    if not table_file.is_file():
        raise RunDirError(f"{path}: no {stem}.parquet yet (has the {kind} finished a point?)")
    table = pd.read_parquet(table_file)
    images = sorted(path.glob("*.png"))
    title = f"vidur-fast {kind}: {path.resolve().name}"
    if kind == "sweep":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            chart = _sweep_pareto(table, Path(tmp) / "pareto.png")
            page = table_page(title, table, [*images, *chart], "pareto" if chart else None)
    elif "answer" in table:  # a min-replicas/GPUs/cost run: the chosen row stands out
        lead = _answer_text(path)
        note = "Highlighted: the answer (the smallest deployment that met the SLOs)."
        page = table_page(title, table, images, "answer", note, lead)
    else:
        page = table_page(title, table, images, "pareto")
    _write_html(target, page)
    return 0


def _answer_text(path: Path) -> str | None:
    import json

    try:
        data = json.loads((path / "answer.json").read_text())
    except (OSError, ValueError):
        return None
    answer = data.get("answer")
    goal = str(data.get("objective", "")).replace("_", " ")
    if not answer:
        return f"{goal}: no deployment met the SLOs at load {data.get('load')}"
    return f"{goal} at load {data.get('load')}: {answer.get('label')}"


def _sweep_pareto(table, png: Path) -> list[Path]:
    """A sweep's cost-latency Pareto frontier over its points (TTFT p90 against the cost per
    1,000 requests): marks table["pareto"] and draws the chart; nothing without the columns."""
    import numpy as np

    from vidur_fast.explore.pareto import pareto_mask, plot_pareto

    x, y = "prefill_e2e_time_p90", "cost_per_1k_requests_usd"
    if x not in table or y not in table:
        return []
    ok = table["status"].eq("ok") if "status" in table else True
    latency = table[x].astype(float).where(ok)
    table["pareto"] = pareto_mask(latency.to_numpy(), table[y].astype(float).to_numpy())
    points = table["point"] if "point" in table else range(len(table))
    table["label"] = [f"point {v}" for v in points]
    if not np.isfinite(latency).any():
        return []
    plot_pareto(
        table,
        x,
        y,
        "label",
        png,
        "sweep: TTFT p90 against cost",
        "TTFT p90 (s)",
        "cost per 1,000 requests (USD)",
    )
    return [png]


def _kept_runs(path: Path, kind: str) -> tuple[list[Path], list[str], str]:
    """A sweep or capacity directory's table as text, and the run directories it kept
    (sweep/capacity --keep-runs) with a label per row, to be compared like runs."""
    import pandas as pd

    from vidur_fast.outputs.console import format_sweep_table

    stem = "results" if kind == "sweep" else "capacity"
    table_file = path / f"{stem}.parquet"
    if not table_file.is_file():
        raise RunDirError(f"{path}: no {stem}.parquet yet (has the {kind} finished a point?)")
    table = pd.read_parquet(table_file)
    key = "point" if kind == "sweep" else "deployment"
    if kind == "capacity":
        table = table.rename(columns={"deployment": "point"})
    text = format_sweep_table(table)
    if "run_dir" not in table or table["run_dir"].isna().all():
        note = f"(no run directories kept: run the {kind} with --keep-runs to compare them)"
        return [], [], f"{text}\n{note}"
    kept = table[table["run_dir"].notna()]
    return [path / r for r in kept["run_dir"]], [f"{key} {p}" for p in kept["point"]], text


def report(args: ReportArgs) -> int:
    if not args.runs:
        raise RunDirError(
            "report: give at least one run directory (vidur-fast report RUN [RUN ...])"
        )
    paths = [Path(p) for p in args.runs]
    if args.html:
        _check_html_target(Path(args.html))
        kinds = [_sweep_kind(p) if p.is_dir() else None for p in paths]
        if any(kinds):
            if len(paths) > 1:
                raise RunDirError("report: a sweep or capacity directory is reported alone")
            return sweep_html(paths[0], kinds[0], Path(args.html))
    labels, preface = None, None
    kinds = [_sweep_kind(p) if p.is_dir() else None for p in paths]
    if any(kinds):
        if len(paths) > 1:
            raise RunDirError("report: a sweep or capacity directory is reported alone")
        paths, labels, preface = _kept_runs(paths[0], kinds[0])
        if not paths:
            print(preface)
            return 0
    summaries = [read_summary(p) for p in paths]  # validates every input before writing
    labels = labels or _labels(paths)
    if args.html:
        from vidur_fast.outputs.html_report import runs_page

        runs = [read_run(p) for p in paths]
        for run, label in zip(runs, labels, strict=True):
            run.name = label
        table, csv_rows = comparison_table(summaries, labels)
        # the page first: a page that cannot be written leaves one error line and no output
        _write_html(Path(args.html), runs_page(runs, labels, (csv_rows[0], csv_rows[1:])))
        print(table + pools_text(summaries, labels))
        if args.out is None:
            return 0
    table, csv_rows = comparison_table(summaries, labels)
    table += pools_text(summaries, labels)
    if preface is not None:
        table = f"{preface}\n\n{table}"
    if args.out is None:
        # nothing is written into the runs compared: files only where --out says
        print(table)
        print("(--out DIR writes report.csv and the plots; --html FILE one page)")
        return 0
    runs = [read_run(p) for p in paths] if args.plots else []
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise RunDirError(f"--out: {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "report.csv", "w", newline="") as f:
            csv.writer(f).writerows(csv_rows)
        from vidur_fast.outputs.pool_report import pool_csv_rows

        pool_rows = pool_csv_rows(summaries, labels)
        if pool_rows:
            with open(out / "pools.csv", "w", newline="") as f:
                csv.writer(f).writerows(pool_rows)
    except OSError as exc:
        raise RunDirError(f"--out: cannot write {out} ({exc.strerror})") from None
    print(table)
    if runs:
        from vidur_fast.outputs.plots import plot_latency_cdfs, write_plots

        for run, label in zip(runs, labels, strict=True):
            run.name = label
        if len(runs) == 1:
            write_plots(runs[0], out)
        else:
            plot_latency_cdfs(runs, out / "latency_cdfs.png")
    print(f"report written to {out}")
    return 0


def main_report(argv: list[str]) -> int:
    from vidur_fast.commands.errors import parse_args_or_raise

    args = parse_args_or_raise(
        lambda: tyro.cli(ReportArgs, args=argv, prog="vidur-fast report"), "vidur-fast report"
    )
    return report(args)
