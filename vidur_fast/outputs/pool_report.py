"""The pools and the disaggregated serving of a run as tables (from summary.json): one row
per pool, the KV hand-offs and transfers, one row per link. `vidur-fast report` prints them
and its HTML page shows them; a one-pool run has none."""

import math

# (column, pool entry key, scale); layout is composed from device, tp and pp
POOL_COLUMNS = (
    ("replicas", "replicas", 1.0),
    ("GPUs", "gpus", 1.0),
    ("step running (%)", "busy_fraction_mean", 100.0),
    ("KV use (%)", "kv_usage_mean", 100.0),
    ("queueing p50 (s)", "scheduling_delay_p50_s", 1.0),
    ("queueing p99 (s)", "scheduling_delay_p99_s", 1.0),
    ("completed", "num_completed", 1.0),
    ("req/s", "throughput_requests_per_s", 1.0),
    ("output tok/s", "throughput_output_tokens_per_s", 1.0),
    ("preemptions", "num_preemptions", 1.0),
    ("cost ($)", "cost_usd", 1.0),
)
# (row label, pd key, scale)
PD_ROWS = (
    ("link bandwidth (GB/s)", "bandwidth_gbps", 1.0),
    ("link latency (us)", "latency_us", 1.0),
    ("NVLink bandwidth (GB/s)", "intra_node_bandwidth_gbps", 1.0),
    ("NVLink latency (us)", "intra_node_latency_us", 1.0),
    ("nodes", "num_nodes", 1.0),
    ("hand-offs", "num_handoffs", 1.0),
    ("transfers", "num_transfers", 1.0),
    ("bytes moved (GB)", "bytes_moved", 1e-9),
    ("transfer mean (ms)", "transfer_time_mean_s", 1e3),
    ("transfer p50 (ms)", "transfer_time_p50_s", 1e3),
    ("transfer p99 (ms)", "transfer_time_p99_s", 1e3),
    ("transfer max (ms)", "transfer_time_max_s", 1e3),
    ("waited for decode KV", "num_waited_for_decode_kv", 1.0),
    ("decode KV wait mean (ms)", "decode_kv_wait_mean_s", 1e3),
    ("decode KV wait p99 (ms)", "decode_kv_wait_p99_s", 1e3),
    ("prefill end to first token mean (ms)", "prefill_end_to_first_token_mean_s", 1e3),
    ("prefill end to first token p99 (ms)", "prefill_end_to_first_token_p99_s", 1e3),
)
LINK_COLUMNS = (
    ("transfers", "num_transfers", 1.0),
    ("bytes moved (GB)", "bytes_moved", 1e-9),
    ("busy (%)", "busy_fraction", 100.0),
    ("bandwidth use (%)", "bandwidth_use_fraction", 100.0),
)


def _num(entry: dict, key: str, scale: float) -> float | int:
    v = entry.get(key)
    if v is None or isinstance(v, (dict, list, str, bool)):
        return math.nan
    if isinstance(v, int) and scale == 1.0:
        return v  # counts stay integers
    return float(v) * scale


def layout(pool: dict) -> str:
    """`2 x h100 tp1` (pp when above 1)."""
    pp = f" pp{pool['pp']}" if int(pool.get("pp", 1)) != 1 else ""
    return f"{pool.get('replicas', '?')} x {pool.get('device', '?')} tp{pool.get('tp', '?')}{pp}"


def has_pool_views(summary: dict) -> bool:
    """Several pools, or a disaggregated run."""
    return len(summary.get("pools") or []) > 1 or bool(summary.get("pd"))


def pool_table(summary: dict) -> tuple[list[str], list[list]]:
    """(header, rows) of the pools: pool, role, layout and POOL_COLUMNS."""
    head = ["pool", "role", "layout", *(c for c, _, _ in POOL_COLUMNS)]
    rows = []
    for k, p in enumerate(summary.get("pools") or []):
        row = [p.get("pool", k), p.get("role", "mixed"), layout(p)]
        rows.append(row + [_num(p, key, scale) for _, key, scale in POOL_COLUMNS])
    return head, rows


def pd_table(summary: dict) -> list[list]:
    """Rows (label, value) of the disaggregated serving block; empty without one."""
    pd = summary.get("pd") or {}
    if not pd:
        return []
    rows = [[label, _num(pd, key, scale)] for label, key, scale in PD_ROWS if key in pd]
    rows.append(["link contention", pd.get("contention", "none")])
    return rows


def link_table(summary: dict) -> tuple[list[str], list[list]]:
    """(header, rows) of the links (per prefill replica its network link, and its NVLink when a
    decode replica shares its node); no rows without them."""
    links = (summary.get("pd") or {}).get("links") or []
    head = ["link (prefill replica)", "kind", *(c for c, _, _ in LINK_COLUMNS)]
    rows = [
        [f"replica {x.get('replica', '?')}", x.get("link", "network")]
        + [_num(x, key, s) for _, key, s in LINK_COLUMNS]
        for x in links
    ]
    return head, rows


def _cell(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        if v == int(v) and abs(v) >= 1000:
            return f"{int(v)}"
        return f"{v:.4g}"
    return str(v)


def _text(head: list[str], rows: list[list], left: int) -> list[str]:
    """A text table; the first `left` columns aligned left, the others right."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(head)]

    def line(values) -> str:
        return "  ".join(
            f"{v:<{w}}" if i < left else f"{v:>{w}}"
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        )

    out = [line(head)]
    out.append("-" * len(out[0]))
    return out + [line(r) for r in cells]


def format_pools(summary: dict, label: str) -> str:
    """The pool table, the disaggregated-serving block and the link table of one run as
    text; empty for a one-pool run without disaggregation."""
    if not has_pool_views(summary):
        return ""
    lines = [f"pools of {label}"]
    lines += _text(*pool_table(summary), left=3)
    pd = pd_table(summary)
    if pd:
        lines += ["", f"disaggregated serving of {label}"]
        width = max(len(r[0]) for r in pd)
        lines += [f"{r[0]:<{width}}  {_cell(r[1]):>12}" for r in pd]
        head, rows = link_table(summary)
        if rows:
            lines += [""] + _text(head, rows, left=2)
    return "\n".join(lines)


def pool_csv_rows(summaries: list[dict], labels: list[str]) -> list[list]:
    """pools.csv of `report --out`: one row per pool of every run with pool views."""
    out = []
    for summary, label in zip(summaries, labels, strict=True):
        if not has_pool_views(summary):
            continue
        head, rows = pool_table(summary)
        if not out:
            out.append(["run", *head])
        out += [[label, *(repr(v) if isinstance(v, float) else v for v in r)] for r in rows]
    return out
