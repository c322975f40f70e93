"""trace.json in Chrome trace-event format (opens in Perfetto UI and chrome://tracing).

One process per replica, one thread per pipeline stage, one complete event ("X") per batch and
stage, and counter events ("C") for KV-cache use and waiting requests at each batch formation.
Events are written in chunks of formatted strings, so memory stays flat on big runs; sampling
(every k-th batch of a replica) and a time window keep the file small.
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd

from vidur_fast import __version__

CHUNK = 200_000
# batch-log columns not in the event args (the event's track and times); the other numeric
# columns are args under their batch-log names
NOT_ARGS = ("replica", "start_s", "end_s", "stage_s")


def _to_ns(x: pd.Series) -> np.ndarray:
    return np.round(x.to_numpy(dtype=np.float64) * 1e9).astype(np.int64)


def stage_spans_ns(batches: pd.DataFrame, pp: int) -> tuple[np.ndarray, np.ndarray]:
    """Begin and end (ns) of every batch on every pipeline stage, shape (n_batches, pp).

    Replays the engine's stage recurrence per replica, vectorised:
    end_s[b] = max(end_{s-1}[b], end_s[b-1]) + d_s[b]  (end_{-1} = formation time), which is
    end_s[b] = D[b] + cummax_j(end_{s-1}[j] - D[j-1]) with D the running sum of d_s. Stages
    before the last take the first stage's duration (same batch features); the last stage
    ends at the logged end time.
    """
    n = len(batches)
    start = _to_ns(batches["start_s"])
    end = _to_ns(batches["end_s"])
    d = _to_ns(batches["stage_s"])
    begin_out = np.empty((n, pp), dtype=np.int64)
    end_out = np.empty((n, pp), dtype=np.int64)
    if pp == 1:
        begin_out[:, 0] = end - d
        end_out[:, 0] = end
        return begin_out, end_out
    rep = batches["replica"].to_numpy()
    run_d = pd.Series(d).groupby(rep).cumsum().to_numpy()
    prev_end = start
    for s in range(pp - 1):
        best = pd.Series(prev_end - (run_d - d)).groupby(rep).cummax().to_numpy()
        end_s = run_d + best
        begin_out[:, s] = end_s - d
        end_out[:, s] = end_s
        prev_end = end_s
    last_prev = pd.Series(end).groupby(rep).shift(1).fillna(-1).to_numpy(dtype=np.int64)
    begin_out[:, pp - 1] = np.maximum(prev_end, last_prev)
    end_out[:, pp - 1] = end
    return begin_out, end_out


def select_batches(
    batches: pd.DataFrame, every: int = 1, start_s: float = 0.0, end_s: float = 0.0
) -> np.ndarray:
    """Row indices of the batches to draw: overlapping [start_s, end_s] (end_s 0 = no end),
    then every k-th batch of each replica."""
    keep = batches["end_s"].to_numpy() >= start_s
    if end_s > 0:
        keep &= batches["start_s"].to_numpy() <= end_s
    idx = np.nonzero(keep)[0]
    if every > 1 and idx.shape[0]:
        nth = (
            pd.Series(batches["replica"].to_numpy()[idx])
            .groupby(batches["replica"].to_numpy()[idx])
            .cumcount()
        )
        idx = idx[nth.to_numpy() % every == 0]
    return idx


def _us(ns: np.ndarray) -> np.ndarray:
    # microseconds; "%.3f" of these prints the exact integer nanoseconds for runs < 10^6 s
    return ns / 1000.0


def _arg_columns(batches: pd.DataFrame, rows: np.ndarray) -> tuple[list[str], list[str], list]:
    """(arg names, %-format of each, value lists) of the numeric batch-log columns."""
    names, fmts, vals = ["batch"], ["%d"], [rows.tolist()]
    for c in batches.columns:
        if c in NOT_ARGS or not pd.api.types.is_numeric_dtype(batches[c]):
            continue
        v = batches[c].to_numpy()[rows]
        names.append(c)
        if np.issubdtype(v.dtype, np.integer) or v.dtype == bool:
            fmts.append("%d")
            vals.append(v.astype(np.int64).tolist())
        else:  # JSON has no NaN: preformat, writing null for it
            fmts.append("%s")
            vals.append([("null" if x != x else f"{x:.6g}") for x in v.astype(float).tolist()])
    return names, fmts, vals


def _batch_kind(pre: np.ndarray, dec: np.ndarray) -> np.ndarray:
    kind = np.full(pre.shape[0], '"mixed"', dtype=object)
    kind[dec == 0] = '"prefill"'
    kind[pre == 0] = '"decode"'
    return kind


def _metadata(n_replicas: int, rep_pp: np.ndarray, rep_pool: np.ndarray | None) -> list[str]:
    out = []
    for r in range(n_replicas):
        name = f"replica {r}" if rep_pool is None else f"replica {r} (pool {rep_pool[r]})"
        out.append(f'{{"name":"process_name","ph":"M","pid":{r},"args":{{"name":"{name}"}}}}')
        out.append(
            f'{{"name":"process_sort_index","ph":"M","pid":{r},"args":{{"sort_index":{r}}}}}'
        )
        for s in range(int(rep_pp[r])):
            out.append(
                f'{{"name":"thread_name","ph":"M","pid":{r},"tid":{s},'
                f'"args":{{"name":"stage {s}"}}}}'
            )
    return out


def _spans_by_depth(batches: pd.DataFrame, rep_pp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """stage_spans_ns with each replica's own pipeline depth (columns past a replica's depth
    are unused)."""
    if np.all(rep_pp == rep_pp[0]):
        return stage_spans_ns(batches, int(rep_pp[0]))
    n = len(batches)
    width = int(rep_pp.max())
    begin = np.zeros((n, width), dtype=np.int64)
    end = np.zeros((n, width), dtype=np.int64)
    depth = rep_pp[batches["replica"].to_numpy()]
    for k in np.unique(depth):
        rows = np.flatnonzero(depth == k)
        b, e = stage_spans_ns(batches.iloc[rows], int(k))
        begin[rows, : int(k)] = b
        end[rows, : int(k)] = e
    return begin, end


def write_trace(
    path: Path,
    batches: pd.DataFrame,
    replicas: pd.DataFrame,
    pp: int,
    every: int = 1,
    start_s: float = 0.0,
    end_s: float = 0.0,
    replica_pp: list[int] | None = None,
) -> int:
    """Write trace.json; returns the number of batches drawn. replica_pp: each replica's
    pipeline stages (a cluster of pools; None = pp for every replica); the replicas of a
    cluster of several pools are named with their pool."""
    n_rep = len(replicas)
    num_blocks = np.maximum(replicas.set_index("replica")["num_blocks"].to_numpy(), 1)
    rep_pp = np.full(max(n_rep, 1), pp) if replica_pp is None else np.asarray(replica_pp)
    rep_pool = None
    if "pool" in replicas and replicas["pool"].nunique() > 1:
        rep_pool = replicas["pool"].to_numpy()
    begin, end = _spans_by_depth(batches, rep_pp) if len(batches) else (None, None)
    sel = select_batches(batches, every, start_s, end_s) if len(batches) else np.zeros(0, int)
    rep_all = batches["replica"].to_numpy() if len(batches) else np.zeros(0, int)
    other = {
        "generator": f"vidur-fast {__version__}",
        "batches_total": int(len(batches)),
        "batches_written": int(sel.shape[0]),
        "every": int(every),
        "window_s": [float(start_s), float(end_s) if end_s > 0 else None],
    }
    with open(path, "w") as f:
        f.write('{"displayTimeUnit":"ms","otherData":')
        f.write(json.dumps(other))
        f.write(',"traceEvents":[\n')
        f.write(",\n".join(_metadata(n_rep, rep_pp, rep_pool)))
        by_rep = sel[np.argsort(rep_all[sel], kind="stable")]
        cuts = np.searchsorted(rep_all[by_rep], np.arange(n_rep + 1), side="left")
        for r in range(n_rep):
            rows_r = by_rep[cuts[r] : cuts[r + 1]]
            if rows_r.shape[0] == 0:
                continue
            for s in range(int(rep_pp[r])):
                order = rows_r[np.argsort(begin[rows_r, s], kind="stable")]
                for lo in range(0, order.shape[0], CHUNK):
                    rows = order[lo : lo + CHUNK]
                    _write_x_chunk(f, batches, rows, begin[rows, s], end[rows, s], r, s, num_blocks)
            order = rows_r[np.argsort(_to_ns(batches["start_s"].iloc[rows_r]), kind="stable")]
            prev = (None, None)
            for lo in range(0, order.shape[0], CHUNK):
                prev = _write_counter_chunk(f, batches, order[lo : lo + CHUNK], r, num_blocks, prev)
        f.write("\n]}\n")
    return int(sel.shape[0])


def _write_x_chunk(f, batches, rows, b_ns, e_ns, r, s, num_blocks) -> None:
    kv = (batches["alloc_blocks"].to_numpy()[rows] / num_blocks[r]).tolist()
    kind = _batch_kind(
        batches["num_prefill_tokens"].to_numpy()[rows],
        batches["num_decode_tokens"].to_numpy()[rows],
    )
    names, fmts, vals = _arg_columns(batches, rows)
    args = ",".join(f"{json.dumps(n)}:{fm}" for n, fm in zip(names, fmts, strict=True))
    # one %-template per event: formatting stays in C, one string per batch
    template = (
        f'{{"name":%s,"cat":"batch","ph":"X","pid":{r},"tid":{s},"ts":%.3f,"dur":%.3f,'
        f'"args":{{{args},"kv_usage_fraction":%.4f}}}}'
    )
    cols = (kind.tolist(), _us(b_ns).tolist(), _us(e_ns - b_ns).tolist(), *vals, kv)
    f.write(",\n" + ",\n".join([template % row for row in zip(*cols, strict=True)]))


def _changes(v: np.ndarray, prev) -> np.ndarray:
    """Mask of samples that differ from the one before (a counter is a step function, so
    repeated values carry no information)."""
    before = np.empty_like(v)
    before[1:] = v[:-1]
    if v.shape[0]:
        before[0] = v[0] - 1 if prev is None else prev
    return v != before


def _write_counter_chunk(f, batches, rows, r, num_blocks, prev) -> tuple:
    """Counter events of one chunk, skipping unchanged values; returns the last values."""
    ts_ns = _to_ns(batches["start_s"].iloc[rows])
    blocks = batches["alloc_blocks"].to_numpy()[rows]
    wait = batches["waiting_requests"].to_numpy()[rows]
    kv_keep = _changes(blocks, prev[0])
    wait_keep = _changes(wait, prev[1])
    kv_pct = (100.0 * blocks[kv_keep] / num_blocks[r]).tolist()
    kv_t = f'{{"name":"kv_use_pct","ph":"C","pid":{r},"ts":%.3f,"args":{{"kv_use_pct":%.3f}}}}'
    wait_t = (
        f'{{"name":"waiting_requests","ph":"C","pid":{r},"ts":%.3f,'
        '"args":{"waiting_requests":%d}}'
    )
    lines = [kv_t % x for x in zip(_us(ts_ns[kv_keep]).tolist(), kv_pct, strict=True)]
    lines += [
        wait_t % x
        for x in zip(_us(ts_ns[wait_keep]).tolist(), wait[wait_keep].tolist(), strict=True)
    ]
    if lines:
        f.write(",\n" + ",\n".join(lines))
    return (blocks[-1], wait[-1]) if rows.shape[0] else prev
