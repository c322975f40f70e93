"""Views of pools and disaggregated serving: the trace's tracks per pool and KV transfers,
the pool and transfer plots, the per-link summary and the report's pool tables."""

import json
from collections import Counter, defaultdict

import numpy as np
import pytest

from vidur_fast.commands.main import main
from vidur_fast.metrics.pools import busy_union_ns
from vidur_fast.outputs import plots as plots_mod
from vidur_fast.outputs.perfetto import write_trace
from vidur_fast.outputs.reader import read_run

POOLS = {0: "pool 0: prefill 2 x h100 tp1", 1: "pool 1: decode 2 x h100 tp1"}


def _events(path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


def _transfers(req):
    t = req[np.isfinite(req["kv_transfer_start_at"]) & (req["prefill_replica"] >= 0)]
    assert len(t) > 10
    return t


def test_trace_has_one_process_per_pool_and_a_thread_per_replica(pd_run_dir, pd_result):
    events = _events(pd_run_dir / "trace.json")
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert procs == POOLS
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }
    assert threads == {
        (0, 0): "replica 0 stage 0",
        (0, 1): "replica 1 stage 0",
        (1, 2): "replica 2 stage 0",
        (1, 3): "replica 3 stage 0",
    }
    per_thread = Counter((e["pid"], e["tid"]) for e in events if e["ph"] == "X")
    batches = pd_result.replicas.set_index("replica")["batches"]
    assert per_thread == {(0, r): batches[r] for r in (0, 1)} | {(1, r): batches[r] for r in (2, 3)}
    counters = {(e["pid"], e["name"]) for e in events if e["ph"] == "C"}
    assert (0, "replica 1 kv_use_pct") in counters and (1, "replica 3 waiting_requests") in counters


def test_each_transfer_is_a_span_on_its_prefill_replicas_link(pd_run_dir, pd_result):
    events = _events(pd_run_dir / "trace.json")
    t = _transfers(pd_result.requests)
    begins = {e["id"]: e for e in events if e["ph"] == "b"}
    ends = {e["id"]: e for e in events if e["ph"] == "e"}
    ids = t["request_id"].astype(int).tolist() if "request_id" in t else t.index.tolist()
    assert set(begins) == set(ends) == set(ids)
    for rid, row in zip(ids, t.itertuples(), strict=True):
        b, e = begins[rid], ends[rid]
        assert b["cat"] == e["cat"] == "kv_transfer"
        assert b["name"] == e["name"] == f"replica {row.prefill_replica} link"
        assert b["pid"] == e["pid"] == 0  # the prefill pool's process
        assert b["ts"] == pytest.approx(row.kv_transfer_start_at * 1e6, abs=2e-3)
        assert e["ts"] == pytest.approx(row.kv_transfer_end_at * 1e6, abs=2e-3)
        assert b["args"]["decode_replica"] == row.replica
        assert b["args"]["kv_transfer_bytes"] == row.kv_transfer_bytes
    # fair share: some transfers on one link overlap (the async spans may)
    by_link = defaultdict(list)
    for row in t.itertuples():
        by_link[row.prefill_replica].append((row.kv_transfer_start_at, row.kv_transfer_end_at))
    overlaps = sum(
        int(np.sum(np.array(sorted(v))[1:, 0] < np.maximum.accumulate(np.array(sorted(v))[:-1, 1])))
        for v in by_link.values()
    )
    assert overlaps > 0


def test_hand_off_flows_go_from_the_prefill_batch_to_the_decode_replica(pd_run_dir, pd_result):
    events = _events(pd_run_dir / "trace.json")
    t = _transfers(pd_result.requests).set_index("request_id", drop=False)
    xs = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            xs[(e["pid"], e["tid"])].append(e)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert set(starts) == set(finishes) == set(t.index)
    for rid, s in starts.items():
        row = t.loc[rid]
        assert (s["pid"], s["tid"]) == (0, int(row["prefill_replica"]))
        # inside a batch with prompt tokens that ended by the transfer's start
        hosts = [x for x in xs[(0, s["tid"])] if x["ts"] <= s["ts"] <= x["ts"] + x["dur"]]
        assert len(hosts) == 1
        host = hosts[0]
        assert host["args"]["num_prefill_tokens"] > 0
        assert host["ts"] + host["dur"] <= row["kv_transfer_start_at"] * 1e6 + 2e-3
        f = finishes[rid]
        assert (f["pid"], f["tid"]) == (1, int(row["replica"]))
        assert "bp" not in f  # binds to the decode replica's next batch after the transfer
        assert f["ts"] == pytest.approx(row["kv_transfer_end_at"] * 1e6, abs=2e-3)
        assert any(x["ts"] >= f["ts"] for x in xs[(1, f["tid"])])


def test_trace_sampling_keeps_every_kth_transfer_per_link(pd_run_dir, tmp_path):
    run = read_run(pd_run_dir)
    path = tmp_path / "t.json"
    write_trace(
        path,
        run.batches,
        run.replicas,
        1,
        every=3,
        pools=run.summary["pools"],
        requests=run.requests,
    )
    begins = [e for e in _events(path) if e["ph"] == "b"]
    t = _transfers(run.requests)
    want = sum(-(-n // 3) for n in t.groupby("prefill_replica").size())
    assert len(begins) == want
    write_trace(
        path,
        run.batches,
        run.replicas,
        1,
        end_s=0.5,
        pools=run.summary["pools"],
        requests=run.requests,
    )
    begins = [e for e in _events(path) if e["ph"] == "b"]
    assert len(begins) == int((t["kv_transfer_start_at"] <= 0.5).sum())


def test_one_pool_trace_has_replica_processes_and_no_transfers(small_run_dir):
    events = _events(small_run_dir / "trace.json")
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {"replica 0", "replica 1"}
    assert not [e for e in events if e["ph"] in "befs"]


def test_busy_union():
    s = np.array([20, 0, 5, 40], dtype=np.int64)
    e = np.array([30, 10, 15, 41], dtype=np.int64)
    assert busy_union_ns(s, e) == 26
    assert busy_union_ns(np.zeros(0, np.int64), np.zeros(0, np.int64)) == 0


def test_summary_links_add_up_to_the_pd_block(pd_result):
    pd_block = pd_result.summary["pd"]
    links = pd_block["links"]
    assert [x["replica"] for x in links] == [0, 1]
    assert sum(x["num_transfers"] for x in links) == pd_block["num_transfers"]
    assert sum(x["bytes_moved"] for x in links) == pd_block["bytes_moved"]
    req = _transfers(pd_result.requests)
    span = pd_result.summary["simulated_time_s"]
    for x in links:
        mine = req[req["prefill_replica"] == x["replica"]]
        dur = (mine["kv_transfer_end_at"] - mine["kv_transfer_start_at"]).sum()
        assert 0 < x["busy_fraction"] <= dur / span + 1e-12  # overlaps counted once
        assert x["bandwidth_use_fraction"] == pytest.approx(
            mine["kv_transfer_bytes"].sum() / (5.0e9 * span), rel=1e-12
        )


def test_pool_plots_carry_one_series_per_pool(pd_run_dir, monkeypatch, tmp_path):
    assert (pd_run_dir / "plots" / "pools.png").is_file()
    assert (pd_run_dir / "plots" / "pd_transfers.png").is_file()
    run = read_run(pd_run_dir)
    figs = []
    monkeypatch.setattr(plots_mod, "_save", lambda fig, path: figs.append(fig) or path)
    plots_mod.plot_pools(run, tmp_path / "p.png")
    axes = figs[0].axes
    ttft = [ln.get_label() for ln in axes[0].get_lines()]
    tpot = [ln.get_label() for ln in axes[1].get_lines()]
    assert ttft == [POOLS[0]] and tpot == [POOLS[1]]  # prompt on prefill, decoding on decode
    busy = axes[2].get_lines()
    assert [ln.get_label() for ln in busy] == [POOLS[0], POOLS[1]]
    assert [ln.get_label() for ln in axes[3].get_lines()] == [POOLS[0], POOLS[1]]
    # the utilisation series integrate to the pools' busy time
    x, width = busy[0].get_xdata(), busy[0].get_xdata()[1] - busy[0].get_xdata()[0]
    span = run.summary["simulated_time_s"]
    for k, line in enumerate(busy):
        pool = run.summary["pools"][k]
        got = np.sum(line.get_ydata()) / 100 * width * pool["replicas"]
        assert got == pytest.approx(pool["busy_fraction_mean"] * pool["replicas"] * span, rel=1e-3)
    assert x.shape[0] == plots_mod.POOL_BINS
    figs.clear()
    plots_mod.plot_pd_transfers(run, tmp_path / "x.png")
    moved = figs[0].axes[1].get_lines()
    assert [ln.get_label() for ln in moved] == ["link of replica 0", "link of replica 1"]
    total = sum(ln.get_ydata()[-1] for ln in moved)
    assert total == pytest.approx(run.summary["pd"]["bytes_moved"] / 1e9)


def test_one_pool_run_has_no_pool_plots(small_run_dir):
    names = {p.name for p in (small_run_dir / "plots").iterdir()}
    assert names == {"latency_cdfs.png", "timeseries.png", "replica_ttft.png"}


def test_report_prints_the_pool_table_and_pd_block(pd_run_dir, small_run_dir, capsys, tmp_path):
    assert main(["report", str(small_run_dir)]) == 0
    assert "pools of" not in capsys.readouterr().out
    assert main(["report", str(small_run_dir), str(pd_run_dir), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "pools of pd" in lines
    head = lines[lines.index("pools of pd") + 1].split()
    assert head[:3] == ["pool", "role", "layout"] and "GPUs" in head and "cost" in head
    rows = lines[lines.index("pools of pd") + 3 : lines.index("pools of pd") + 5]
    assert rows[0].split()[:6] == ["0", "prefill", "2", "x", "h100", "tp1"]
    assert rows[1].split()[:2] == ["1", "decode"]
    pd_block = json.loads((pd_run_dir / "summary.json").read_text())["pd"]
    assert "disaggregated serving of pd" in lines
    moved = next(x for x in lines if x.startswith("bytes moved (GB)"))
    assert float(moved.split()[-1]) == pytest.approx(pd_block["bytes_moved"] / 1e9, rel=1e-3)
    waited = next(x for x in lines if x.startswith("waited for decode KV"))
    assert int(waited.split()[-1]) == pd_block["num_waited_for_decode_kv"]
    assert any(x.startswith("transfer p99 (ms)") for x in lines)
    assert any(x.startswith("replica 1 ") for x in lines)  # the link table
    csv_rows = (tmp_path / "r" / "pools.csv").read_text().splitlines()
    assert csv_rows[0].startswith("run,pool,role,layout") and len(csv_rows) == 3


def test_pool_views_are_byte_identical_when_written_twice(pd_result, pd_run_dir, tmp_path):
    from tests.helpers.outputs_fixtures import write_plain

    again = write_plain(pd_result, tmp_path / "again", write_plots=True, write_trace=True)
    for name in ("trace.json", "summary.json", "plots/pools.png", "plots/pd_transfers.png"):
        assert (again / name).read_bytes() == (pd_run_dir / name).read_bytes(), name
