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
    layout = f"TP{run['tp']} PP{run['pp']}"
    if "attention_dp" in run:  # MoE: each replica is one DP rank of an engine
        layout += f" DP{run['attention_dp']} EP{run['moe_ep']}"
    return (
        f"{run['model']} on {run['device']} ({layout}, {replicas}),"
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


def format_load(summary: dict) -> str:
    """How close to saturation the replicas ran: batch fill and KV use; the busy time counts
    any running step, however small, so it is not a saturation figure on its own."""
    parts = []
    mean, cap = summary.get("running_batch_mean"), summary.get("batch_size_cap")
    if mean is not None and cap:
        parts.append(f"mean running batch {mean:.1f} of {cap} seqs ({100 * mean / cap:.1f}%)")
    parts.append(
        f"KV use mean {100 * summary['kv_usage_mean']:.1f}% peak"
        f" {100 * summary['kv_usage_peak']:.1f}%"
    )
    parts.append(f"a step running {100 * summary.get('busy_fraction_mean', 0.0):.1f}% of the time")
    return "saturation: " + "; ".join(parts)


def format_closed_loop(summary: dict) -> str | None:
    loop = summary.get("closed_loop")
    if not loop:
        return None
    left = loop["num_excluded"]
    warm = min(loop.get("warmup_requests", 0), left)
    other = left - warm
    why = f"{warm} warm-up" + (f" and {other} outside the measurement window" if other else "")
    return (
        f"closed loop: {loop['concurrency']} clients, {loop['num_released']} requests sent,"
        f" {loop['num_measured']} measured ({left} left out: {why})"
    )


def format_summary(summary: dict) -> str:
    lines = [format_header(summary["run"])] if "run" in summary else []
    loop_line = format_closed_loop(summary)
    lines += [
        f"requests {summary['num_completed']}/{summary['num_requests']} completed"
        f" ({summary['num_rejected']} rejected), status {summary['status']},"
        f" simulated {summary['simulated_time_s']:.2f} s",
        f"throughput {summary['throughput_requests_per_s']:.3f} req/s,"
        f" {summary['throughput_output_tokens_per_s']:.1f} output tok/s;"
        f" preemptions {summary['num_preemptions']}",
        format_load(summary),
        f"{'metric':<22}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}",
    ]
    if loop_line:
        lines.insert(len(lines) - 1, loop_line)
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
    if summary.get("pd"):
        lines.append(format_pd(summary["pd"]))
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
    ("capacity_qps", "capacity req/s"),
    ("met", "SLOs met"),
    ("answer", "answer"),
    ("throughput_requests_per_s", "req/s"),
    ("prefill_e2e_time_p90", "TTFT p90 s"),
    ("tbt_p99", "TBT p99 s"),
    ("request_e2e_time_p99", "E2E p99 s"),
    ("prefix_cache_hit_rate", "hit rate"),
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


def format_pd(x: dict) -> str:
    """Console line of disaggregated serving: KV transfers and the decode-side waits."""

    def ms(v):
        return f"{1e3 * v:.2f} ms" if v is not None else "-"

    nvl = ""
    by = x.get("by_link")
    if by is not None and "intra_node_bandwidth_gbps" in x:
        nvl = (
            f"; NVLink {x['intra_node_bandwidth_gbps']:g} GB/s, {x['intra_node_latency_us']:g}"
            f" us, {by['nvlink']['num_transfers']} of the transfers"
        )
    return (
        f"KV transfer ({x['bandwidth_gbps']:g} GB/s, {x['latency_us']:g} us{nvl}):"
        f" {x['num_transfers']} transfers, {x['bytes_moved'] / 1e9:.3f} GB,"
        f" time p50 {ms(x['transfer_time_p50_s'])} p99 {ms(x['transfer_time_p99_s'])};"
        f" {x['num_waited_for_decode_kv']} of {x['num_handoffs']} waited for decode KV"
        f" (wait mean {ms(x['decode_kv_wait_mean_s'])}); prefill end to first token mean"
        f" {ms(x.get('prefill_end_to_first_token_mean_s'))}"
    )
