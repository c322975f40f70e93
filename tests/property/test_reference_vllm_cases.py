"""The plain-Python reference's vLLM v1 scheduler and prefix-caching pool replay every recorded
vLLM v1 case with the same decisions, step by step (the same cases and driver rules as
tests/fidelity/test_vllm_v1_oracle.py, which replays them through the kernels): so the oracle
the kernels are compared with is itself checked against vLLM."""

from pathlib import Path

import pytest
from vidur_fast.kernels.codes import RouterPolicy, SchedPolicy

from tests.helpers.engine_harness import sched_params
from tests.helpers.v1_replay import _output_token, chained_block_hashes, load_case_workload
from tests.helpers.vllm_cases import CASES, expected_requests, expected_rows
from tests.reference.block_pool import CountedBlockPool
from tests.reference.naive_sim import InFlight, Replica, _finish
from tests.reference.prefix_pool import PrefixCachingBlockPool
from tests.reference.request import Request
from tests.reference.routers import Router
from tests.reference.sched_v1 import VllmV1


def _params(cfg: dict):
    batch_cap = int(cfg["max_num_seqs"])
    return sched_params(
        policy=int(SchedPolicy.VLLM_V1),
        router=int(RouterPolicy.ROUND_ROBIN),
        num_replicas=1,
        pp=1,
        block_size=int(cfg["block_size"]),
        usable_blocks=int(cfg["num_gpu_blocks"]) - 1,  # vLLM's null block is never handed out
        max_num_seqs=batch_cap,
        max_num_batched_tokens=int(cfg["max_num_batched_tokens"]),
        long_prefill_token_threshold=int(cfg["long_prefill_token_threshold"]),
        max_model_len=int(cfg["max_model_len"]),
        reserve_full_sequence=int(bool(cfg["scheduler_reserve_full_isl"])),
        enable_prefix_caching=int(bool(cfg["enable_prefix_caching"])),
        async_scheduling=int(bool(cfg.get("async_scheduling"))),
    )


def replay_reference(case_dir: Path):
    """Step one reference replica as the recording did: arrivals (by step or by time, or when
    the request a turn depends on finishes) are queued before each scheduling call; with async
    scheduling each step is formed before the oldest of two queued steps is applied."""
    import json

    cfg = json.loads((case_dir / "meta.json").read_text())["config"]
    assert cfg.get("policy", "fcfs") == "fcfs" and cfg.get("watermark", 0.0) == 0.0
    p = _params(cfg)
    specs = load_case_workload(case_dir / "workload.csv")
    bs = p.block_size
    reqs = []
    for k, s in enumerate(specs):
        outputs = [_output_token(s.rid, j) for j in range(s.max_tokens)]
        reqs.append(
            Request(
                rid=k,
                arrival_ns=0,
                prompt=len(s.tokens),
                decode=s.max_tokens,
                total=len(s.tokens) + s.max_tokens,
                asked_decode=s.max_tokens,
                replica=0,
                hashes=chained_block_hashes(s.tokens + outputs, bs),
            )
        )
    pool = (
        PrefixCachingBlockPool(p.usable_blocks, bs)
        if p.enable_prefix_caching
        else CountedBlockPool(p.usable_blocks)
    )
    sched = VllmV1(p, pool)
    rep = Replica(rid=0, sched=sched, pp=1, stage_free=[0])
    router = Router(p)
    time_mode = cfg["arrival"] == "time"
    base, per_tok = float(cfg["step_time_base"]), float(cfg["step_time_per_token"])
    dependents: dict[str, list[int]] = {}
    ready: list[tuple[float, int]] = []
    for k, s in enumerate(specs):
        if s.depends_on:
            dependents.setdefault(s.depends_on, []).append(k)
        else:
            ready.append((s.arrival, k))
    rows = []
    step, clock, flush = 0, 0.0, False
    queue: list[tuple[int, list]] = []  # (step, items) formed, not yet applied

    def apply(sstep: int, items: list) -> None:
        nonlocal flush
        if not items:
            return
        batch = InFlight(sstep, 0, items)
        rep.batches.append(batch)
        _finish(rep, batch, round(clock * 1e9), router, True)
        for req, _ in items:
            if req.done_ns is not None and req.rid not in finished:
                finished.add(req.rid)
                flush = True
                for dep in dependents.get(specs[req.rid].rid, []):
                    d = specs[dep].delay
                    ready.append(((clock + d) if time_mode else (sstep + 1 + d), dep))

    finished: set = set()
    while len(finished) < len(reqs):
        now = clock if time_mode else float(step)
        ready.sort()
        while ready and ready[0][0] <= now + 1e-12:
            sched.add_request(reqs[ready.pop(0)[1]])
        if not sched.running and not sched.waiting and not flush and not queue:
            nxt = min(ready)[0]
            if time_mode:
                clock = max(clock, nxt)
            else:
                step = max(step, int(nxt))
            continue
        waiting = {q.rid for q in sched.waiting}
        items = sched.next_batch(round(clock * 1e9))
        ntok = 0
        for pos, (req, t) in enumerate(items):
            if req.rid not in waiting:
                kind = "running"
            else:
                kind = "resumed" if req.restarts > 0 else "new"
            rows.append((step, pos, specs[req.rid].rid, kind, req.computed - t, t))
            ntok += t
        if time_mode and ntok > 0:
            clock += base + per_tok * ntok
        flush = False
        queue.append((step, items))
        if not p.async_scheduling:
            apply(*queue.pop(0))
        elif not (len(queue) < 2 and (ntok > 0 or sched.running or sched.waiting)):
            apply(*queue.pop(0))
        step += 1
    hits = {specs[q.rid].rid: q.cached_tokens or 0 for q in reqs}
    preemptions = {specs[q.rid].rid: q.restarts for q in reqs}
    return rows, hits, preemptions


@pytest.mark.skipif(not CASES, reason="no vLLM v1 reference cases found")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reference_replays_vllm(case: Path):
    rows, hits, preemptions = replay_reference(case)
    want = expected_rows(case)
    for k, (g, w) in enumerate(zip(rows, want, strict=False)):
        assert g == w, f"{case.name}: row {k} differs: got {g}, want {w}"
    assert len(rows) == len(want), f"{case.name}: {len(rows)} rows, want {len(want)}"
    want_hits, want_pre = expected_requests(case)
    assert hits == want_hits
    assert preemptions == want_pre
