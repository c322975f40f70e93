"""The one-screen summary table printed after a run."""

ROWS = (
    ("TTFT (s)", "prefill_e2e_time"),
    ("E2E latency (s)", "request_e2e_time"),
    ("Scheduling delay (s)", "request_scheduling_delay"),
    ("TPOT (s/token)", "decode_time_execution_plus_preemption_normalized"),
    ("TBT (s)", "tbt"),
)


def format_summary(summary: dict) -> str:
    lines = [
        f"requests {summary['num_completed']}/{summary['num_requests']} completed"
        f" ({summary['num_rejected']} rejected), status {summary['status']},"
        f" simulated {summary['simulated_time_s']:.2f} s",
        f"throughput {summary['throughput_requests_per_s']:.3f} req/s,"
        f" {summary['throughput_output_tokens_per_s']:.1f} output tok/s;"
        f" preemptions {summary['num_preemptions']}; KV use mean"
        f" {100 * summary['kv_usage_mean']:.1f}% peak {100 * summary['kv_usage_peak']:.1f}%;"
        f" busy {100 * summary.get('busy_fraction_mean', 0.0):.1f}%",
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
            f"cost ${summary['cost_usd']:.4f} on {summary['gpus']} GPUs,"
            f" ${summary['cost_per_1k_requests_usd']:.4f} per 1k requests"
        )
    return "\n".join(lines)
