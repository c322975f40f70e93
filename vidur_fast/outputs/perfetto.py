"""trace.json in Chrome trace-event format (opens in Perfetto UI and chrome://tracing).

One process per replica, one thread per pipeline stage, one complete event ("X") per batch and
stage, and counter events ("C") for KV-cache use and waiting requests at each batch formation.
With several pools, one process per pool (named by its layout) with a thread per replica and
stage; a disaggregated run adds its KV transfers (async spans on each prefill replica's link)
and hand-off flows from the prefill batch to the decode replica.
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


def pool_label(k: int, pool: dict) -> str:
    """A pool's track name: `pool 0: prefill 2 x h100 tp1` (pp when above 1)."""
    from vidur_fast.outputs.pool_report import layout

    return f"pool {k}: {pool.get('role', 'mixed')} {layout(pool)}"


class _Tracks:
    """Where each replica's events go. One pool: process r, thread s (stage s) per replica.
    Several pools: one process per pool (named by its layout), one thread per replica and
    stage, counters named with the replica."""

    def __init__(self, rep_pp: np.ndarray, rep_pool: np.ndarray | None, pools: list | None):
        self.rep_pp = rep_pp
        self.grouped = rep_pool is not None and pools is not None and len(pools) > 1
        n = rep_pp.shape[0]
        if self.grouped:
            self.pid = np.asarray(rep_pool, dtype=np.int64)
            self.tid0 = np.concatenate([[0], np.cumsum(rep_pp)[:-1]]).astype(np.int64)
        else:
            self.pid = np.arange(n, dtype=np.int64)
            self.tid0 = np.zeros(n, dtype=np.int64)
        self.rep_pool, self.pools = rep_pool, pools

    def tid(self, r: int, s: int) -> int:
        return int(self.tid0[r]) + s

    def counter(self, r: int, name: str) -> str:
        return f"replica {r} {name}" if self.grouped else name

    def metadata(self) -> list[str]:
        n = self.rep_pp.shape[0]
        if not self.grouped:
            return _metadata(n, self.rep_pp, self.rep_pool)
        out = []
        for k, pool in enumerate(self.pools):
            name = json.dumps(pool_label(k, pool))
            out.append(f'{{"name":"process_name","ph":"M","pid":{k},"args":{{"name":{name}}}}}')
            out.append(
                f'{{"name":"process_sort_index","ph":"M","pid":{k},"args":{{"sort_index":{k}}}}}'
            )
        for r in range(n):
            for s in range(int(self.rep_pp[r])):
                pid, tid = int(self.pid[r]), self.tid(r, s)
                out.append(
                    f'{{"name":"thread_name","ph":"M","pid":{pid},"tid":{tid},'
                    f'"args":{{"name":"replica {r} stage {s}"}}}}'
                )
                out.append(
                    f'{{"name":"thread_sort_index","ph":"M","pid":{pid},"tid":{tid},'
                    f'"args":{{"sort_index":{tid}}}}}'
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
    pools: list[dict] | None = None,
    requests: pd.DataFrame | None = None,
) -> int:
    """Write trace.json; returns the number of batches drawn. replica_pp: each replica's
    pipeline stages (a cluster of pools; None = pp for every replica). pools: summary.json's
    `pools` entries; with several, each pool is one process named by its layout holding its
    replicas' stages (without, the replicas of several pools are named with their pool).
    requests: the request table; with a disaggregated run's columns (`prefill_replica`,
    `kv_transfer_start_at`, `kv_transfer_end_at`) each KV transfer is drawn on its prefill
    replica's link, with a flow from the prefill batch to the decode replica."""
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
        tracks = _Tracks(rep_pp[:n_rep], rep_pool, pools)
        f.write(",\n".join(tracks.metadata()))
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
                    _write_x_chunk(
                        f,
                        batches,
                        rows,
                        begin[rows, s],
                        end[rows, s],
                        r,
                        num_blocks,
                        int(tracks.pid[r]),
                        tracks.tid(r, s),
                    )
            order = rows_r[np.argsort(_to_ns(batches["start_s"].iloc[rows_r]), kind="stable")]
            prev = (None, None)
            for lo in range(0, order.shape[0], CHUNK):
                prev = _write_counter_chunk(
                    f, batches, order[lo : lo + CHUNK], r, num_blocks, prev, tracks
                )
        if requests is not None and len(batches):
            _write_pd(f, requests, batches, rep_all, sel, begin, end, tracks, every, start_s, end_s)
        f.write("\n]}\n")
    return int(sel.shape[0])


def _write_x_chunk(f, batches, rows, b_ns, e_ns, r, num_blocks, pid, tid) -> None:
    kv = (batches["alloc_blocks"].to_numpy()[rows] / num_blocks[r]).tolist()
    kind = _batch_kind(
        batches["num_prefill_tokens"].to_numpy()[rows],
        batches["num_decode_tokens"].to_numpy()[rows],
    )
    names, fmts, vals = _arg_columns(batches, rows)
    args = ",".join(f"{json.dumps(n)}:{fm}" for n, fm in zip(names, fmts, strict=True))
    # one %-template per event: formatting stays in C, one string per batch
    template = (
        f'{{"name":%s,"cat":"batch","ph":"X","pid":{pid},"tid":{tid},"ts":%.3f,"dur":%.3f,'
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


def _write_counter_chunk(f, batches, rows, r, num_blocks, prev, tracks) -> tuple:
    """Counter events of one chunk, skipping unchanged values; returns the last values."""
    ts_ns = _to_ns(batches["start_s"].iloc[rows])
    blocks = batches["alloc_blocks"].to_numpy()[rows]
    wait = batches["waiting_requests"].to_numpy()[rows]
    kv_keep = _changes(blocks, prev[0])
    wait_keep = _changes(wait, prev[1])
    kv_pct = (100.0 * blocks[kv_keep] / num_blocks[r]).tolist()
    pid, kv_name, wait_name = (
        int(tracks.pid[r]),
        tracks.counter(r, "kv_use_pct"),
        tracks.counter(r, "waiting_requests"),
    )
    kv_t = f'{{"name":"{kv_name}","ph":"C","pid":{pid},"ts":%.3f,"args":{{"kv_use_pct":%.3f}}}}'
    wait_t = (
        f'{{"name":"{wait_name}","ph":"C","pid":{pid},"ts":%.3f,"args":{{"waiting_requests":%d}}}}'
    )
    lines = [kv_t % x for x in zip(_us(ts_ns[kv_keep]).tolist(), kv_pct, strict=True)]
    lines += [
        wait_t % x
        for x in zip(_us(ts_ns[wait_keep]).tolist(), wait[wait_keep].tolist(), strict=True)
    ]
    if lines:
        f.write(",\n" + ",\n".join(lines))
    return (blocks[-1], wait[-1]) if rows.shape[0] else prev


def _pd_arg_columns(requests: pd.DataFrame) -> list[str]:
    """Request columns shown on a transfer: the decode replica and the disaggregation columns
    other than the transfer's times (whatever the run carries: `kv_transfer_bytes`,
    `waited_for_decode_kv`, ...)."""
    cols = ["replica"]
    for c in requests.columns:
        if c in ("kv_transfer_start_at", "kv_transfer_end_at", "prefill_replica"):
            continue
        if ("kv_transfer" in c or "decode_kv" in c) and (
            pd.api.types.is_numeric_dtype(requests[c]) or requests[c].dtype == bool
        ):
            cols.append(c)
    return cols


def _write_pd(f, requests, batches, rep_all, sel, begin, end, tracks, every, start_s, end_s):
    """The KV transfers of a disaggregated run: one async span per transfer on its prefill
    replica's link (`replica p link`, in the prefill pool's process; async spans may overlap)
    and a flow from the prefill batch that ended the request's prompt (the last batch on the
    prefill replica's last stage to end by the hand-off) to the decode replica's next batch
    after the transfer."""
    need = ("prefill_replica", "kv_transfer_start_at", "kv_transfer_end_at", "replica")
    if any(c not in requests for c in need):
        return
    src = requests["prefill_replica"].to_numpy(np.int64)
    dst = requests["replica"].to_numpy(np.int64)
    st = requests["kv_transfer_start_at"].to_numpy(np.float64)
    en = requests["kv_transfer_end_at"].to_numpy(np.float64)
    ok = (src >= 0) & (dst >= 0) & np.isfinite(st) & np.isfinite(en) & (en >= start_s)
    if end_s > 0:
        ok &= st <= end_s
    idx = np.flatnonzero(ok)
    if idx.shape[0] == 0:
        return
    st_ns = np.round(st[idx] * 1e9).astype(np.int64)
    en_ns = np.round(en[idx] * 1e9).astype(np.int64)
    rid = requests["request_id"].to_numpy(np.int64)[idx] if "request_id" in requests else idx
    order = np.lexsort((rid, st_ns, src[idx]))  # per link, by start
    idx, st_ns, en_ns, rid = idx[order], st_ns[order], en_ns[order], rid[order]
    if every > 1:
        nth = pd.Series(src[idx]).groupby(src[idx]).cumcount().to_numpy()
        keep = nth % every == 0
        idx, st_ns, en_ns, rid = idx[keep], st_ns[keep], en_ns[keep], rid[keep]
    s_rep, d_rep = src[idx], dst[idx]
    # hand-off: the prompt's end on the prefill replica (no later than the transfer start)
    hand = st_ns.copy()
    if "prefill_end_at" in requests:
        pc = requests["prefill_end_at"].to_numpy(np.float64)[idx]
        fin = np.isfinite(pc)
        pc_ns = np.round(np.where(fin, pc, 0.0) * 1e9).astype(np.int64)
        hand = np.where(fin & (pc_ns <= st_ns), pc_ns, st_ns)
    drawn = np.zeros(rep_all.shape[0], dtype=bool)
    drawn[sel] = True
    last = tracks.rep_pp[rep_all] - 1
    last_b = begin[np.arange(rep_all.shape[0]), last]
    last_e = end[np.arange(rep_all.shape[0]), last]
    from_row = np.full(idx.shape[0], -1, dtype=np.int64)
    by_rep = np.argsort(rep_all, kind="stable")
    cuts = np.searchsorted(rep_all[by_rep], np.arange(tracks.rep_pp.shape[0] + 1), side="left")
    for p in np.unique(s_rep).tolist():
        rows = by_rep[cuts[p] : cuts[p + 1]]
        rows = rows[np.argsort(last_e[rows], kind="stable")]
        mine = np.flatnonzero(s_rep == p)
        k = np.searchsorted(last_e[rows], hand[mine], side="right") - 1
        from_row[mine] = np.where(k >= 0, rows[np.maximum(k, 0)], -1)
    cols = _pd_arg_columns(requests)
    vals = [requests[c].to_numpy()[idx] for c in cols]
    arg_fmt = ",".join(
        f'"{"decode_replica" if c == "replica" else c}":%d'
        if (np.issubdtype(v.dtype, np.integer) or v.dtype == bool)
        else f'"{c}":%s'
        for c, v in zip(cols, vals, strict=True)
    )
    arg_vals = [
        v.astype(np.int64).tolist()
        if (np.issubdtype(v.dtype, np.integer) or v.dtype == bool)
        else [("null" if x != x else f"{x:.6g}") for x in v.astype(float).tolist()]
        for v in vals
    ]
    pid = tracks.pid
    src_tid = tracks.tid0[s_rep].tolist()
    b_t = (
        '{"name":"replica %d link","cat":"kv_transfer","ph":"b","id":%d,"pid":%d,"tid":%d,'
        '"ts":%.3f,"args":{"request_id":%d,' + arg_fmt + "}}"
    )
    e_t = (
        '{"name":"replica %d link","cat":"kv_transfer","ph":"e","id":%d,"pid":%d,"tid":%d,'
        '"ts":%.3f}'
    )
    common = (s_rep.tolist(), rid.tolist(), pid[s_rep].tolist(), src_tid)
    lines = [
        b_t % row for row in zip(*common, _us(st_ns).tolist(), rid.tolist(), *arg_vals, strict=True)
    ]
    lines += [e_t % row for row in zip(*common, _us(en_ns).tolist(), strict=True)]
    flow = np.flatnonzero(from_row >= 0)
    flow = flow[drawn[from_row[flow]]]
    if flow.shape[0]:
        rows = from_row[flow]
        mid = (last_b[rows] + last_e[rows]) // 2
        s_t = (
            '{"name":"kv hand-off","cat":"kv_handoff","ph":"s","id":%d,"pid":%d,"tid":%d,"ts":%.3f}'
        )
        f_t = (
            '{"name":"kv hand-off","cat":"kv_handoff","ph":"f","id":%d,"pid":%d,"tid":%d,"ts":%.3f}'
        )
        fr = rid[flow].tolist()
        lines += [
            s_t % row
            for row in zip(
                fr,
                pid[s_rep[flow]].tolist(),
                (tracks.tid0[s_rep[flow]] + tracks.rep_pp[s_rep[flow]] - 1).tolist(),
                _us(mid).tolist(),
                strict=True,
            )
        ]
        lines += [
            f_t % row
            for row in zip(
                fr,
                pid[d_rep[flow]].tolist(),
                tracks.tid0[d_rep[flow]].tolist(),
                _us(en_ns[flow]).tolist(),
                strict=True,
            )
        ]
    f.write(",\n" + ",\n".join(lines))
