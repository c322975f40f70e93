"""The one-screen summary table printed after a run."""

ROWS = (
    ("TTFT (s)", "prefill_e2e_time"),
    ("E2E latency (s)", "request_e2e_time"),
    ("Scheduling delay (s)", "request_scheduling_delay"),
    ("TPOT (s/token)", "decode_time_execution_plus_preemption_normalized"),
    ("TBT (s)", "tbt"),
)


def format_header(run: dict) -> str:
    replicas = f"{run['replicas']} replica{'s' if run['replicas'] != 1 else ''}"
    return (
        f"{run['model']} on {run['device']} (TP{run['tp']} PP{run['pp']}, {replicas}),"
        f" {run['scheduler']}, {run['router']}; {run['requests']:,} requests of {run['workload']}"
    )


def format_warnings(summary: dict) -> list[str]:
    """`warning:` lines for what the numbers leave out: requests rejected up front."""
    out = []
    n = summary["num_requests"]
    for reason in summary.get("rejected_by_reason", {}).values():
        out.append(
            f"warning: {reason['count']:,} of {n:,} requests rejected: {reason['bound']}"
            f" (use {reason['fix']}); the percentiles cover the others"
        )
    return out


def format_summary(summary: dict) -> str:
    lines = [format_header(summary["run"])] if "run" in summary else []
    lines += [
        f"requests {summary['num_completed']}/{summary['num_requests']} completed"
        f" ({summary['num_rejected']} rejected), status {summary['status']},"
        f" simulated {summary['simulated_time_s']:.2f} s",
        f"throughput {summary['throughput_requests_per_s']:.3f} req/s,"
        f" {summary['throughput_output_tokens_per_s']:.1f} output tok/s;"
        f" preemptions {summary['num_preemptions']}; KV use mean"
        f" {100 * summary['kv_usage_mean']:.1f}% peak {100 * summary['kv_usage_peak']:.1f}%;"
        f" replicas busy {100 * summary.get('busy_fraction_mean', 0.0):.1f}% of the time",
        f"{'metric':<22}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}",
    ]
    for label, key in ROWS:
        d = summary.get(key, {})
        if not d or d.get("count", 0) == 0:
            continue
        cells = "".join(
            f"{d[c]:>10.4f}" if c in d else f"{'-':>10}"
            for c in ("mean", "p50", "p90", "p99", "max")
        )
        lines.append(f"{label:<22}{cells}")
    hits = summary.get("prefix_cache_hit_tokens", 0)
    if hits:
        lines.append(f"prefix-cache hits: {hits} prompt tokens")
    clamped = sum(summary.get("clamped_lookups", {}).values())
    if clamped:
        lines.append(f"warning: {clamped} timing lookups fell outside the grids and were clamped")
    if summary.get("cost_per_1k_requests_usd") is not None:
        lines.append(
            f"cost ${summary['cost_usd']:.4f} on {summary['gpus']}"
            f" GPU{'s' if summary['gpus'] != 1 else ''},"
            f" ${summary['cost_per_1k_requests_usd']:.4f} per 1k requests"
        )
    if len(summary.get("pools", ())) > 1:
        lines += format_pools(summary["pools"])
    return "\n".join(lines)


# sweep table: the deployment columns that vary, then these figures
SWEEP_AXES = (
    "model",
    "device",
    "node",
    "tp",
    "pp",
    "num_replicas",
    "scheduler",
    "router",
    "workload",
    "qps",
    "seed",
)
SWEEP_FIGURES = (
    ("status", "status"),
    ("throughput_requests_per_s", "req/s"),
    ("prefill_e2e_time_p90", "TTFT p90 s"),
    ("tbt_p99", "TBT p99 s"),
    ("request_e2e_time_p99", "E2E p99 s"),
    ("cost_per_1k_requests_usd", "$/1k req"),
)


def format_sweep_table(table) -> str:
    """One line per point: the deployment settings that differ between points and the key
    figures."""
    axes = [c for c in SWEEP_AXES if c in table and table[c].astype(str).nunique() > 1]
    figures = [(c, h) for c, h in SWEEP_FIGURES if c in table]
    heads = ["point", *axes, *(h for _, h in figures)]
    rows = []
    for _, r in table.iterrows():
        cells = [str(r["point"])] + [str(r[a]) for a in axes]
        for col, _ in figures:
            v = r[col]
            cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        rows.append(cells)
    widths = [max(len(h), *(len(row[k]) for row in rows)) for k, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def format_pools(pools: list[dict]) -> list[str]:
    """Console lines, one per pool."""
    lines = []
    for p in pools:
        delay = p["scheduling_delay_p50_s"]
        delay_txt = f"{delay:.3f} s" if delay is not None else "-"
        lines.append(
            f"pool {p['pool']}: {p['replicas']} x {p['device']} TP{p['tp']} PP{p['pp']}"
            f" ({p['role']}): busy {100 * p['busy_fraction_mean']:.1f}%,"
            f" {p['num_completed']} done, {p['throughput_output_tokens_per_s']:.1f} output"
            f" tok/s, queueing p50 {delay_txt}, cost ${p['cost_usd']:.4f}"
        )
    return lines
