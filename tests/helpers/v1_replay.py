"""Replay a recorded vLLM v1 scheduler case through the engine's own kernels.

A case directory holds workload.csv (request_id, arrival, prompt segments, max_tokens,
depends_on, delay) and meta.json (scheduler settings, arrival mode). The driver resolves the
prompts to token ids the way the recording did (shared/unique segments from seeded generators,
`req:<id>` = that request's prompt plus its deterministic outputs), derives chained block
hashes over prompt + output, and then steps one replica: arrivals are queued before each
scheduling call, `schedule_vllm_v1_nb` forms the batch and the loop's batch-finish kernel
applies it. Step cost in time mode is base + per_token * tokens (an empty step costs 0).

Async scheduling follows the recording's batch queue of two (vLLM's
EngineCore.step_with_batch_queue): each iteration forms step k into the free one of two batch
slots, then applies the oldest queued step; empty steps are queued too.
"""

import csv
import hashlib
import json
import random
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from vidur_fast.kernels.codes import ReqStatus, RouterPolicy, SchedPolicy
from vidur_fast.kernels.dtypes import NS_PER_S
from vidur_fast.kernels.loop import _finish_batch_nb
from vidur_fast.kernels.pd import no_pd
from vidur_fast.kernels.pools import one_pool
from vidur_fast.kernels.queues import wq_push_back_nb
from vidur_fast.kernels.sched_v1 import schedule_vllm_v1_nb
from vidur_fast.kernels.state import SchedParams, block_shift_of

from vidur_fast.engine.state import alloc_hist, alloc_kv, alloc_reps, alloc_reqs
from vidur_fast.workload.closed_loop import closed_loop_state

VOCAB_LO, VOCAB_HI = 100, 32000


def _seq(key: str, n: int) -> list[int]:
    rng = random.Random(zlib.crc32(key.encode()))
    return [rng.randrange(VOCAB_LO, VOCAB_HI) for _ in range(n)]


def _output_token(rid: str, k: int) -> int:
    return VOCAB_LO + zlib.crc32(f"{rid}#{k}".encode()) % (VOCAB_HI - VOCAB_LO)


@dataclass
class CaseRequest:
    rid: str
    arrival: float | None
    tokens: list[int]  # prompt
    max_tokens: int
    depends_on: str | None
    delay: float


def load_case_workload(path: Path) -> list[CaseRequest]:
    out: list[CaseRequest] = []
    full: dict[str, list[int]] = {}  # prompt + outputs of each request
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            rid = row["request_id"]
            toks: list[int] = []
            for seg in filter(None, (x.strip() for x in row["prompt"].split(";"))):
                kind, _, rest = seg.partition(":")
                if kind == "shared":
                    name, _, n = rest.rpartition(":")
                    toks += _seq("shared/" + name, int(n))
                elif kind == "unique":
                    toks += _seq("unique/" + rid, int(rest))
                elif kind == "req":
                    toks += full[rest]
                elif kind == "ids":
                    toks += [int(x) for x in rest.split()]
                else:
                    raise ValueError(f"{rid}: unknown prompt segment {seg!r}")
            mt = int(row["max_tokens"])
            full[rid] = toks + [_output_token(rid, k) for k in range(mt)]
            arr = (row.get("arrival") or "").strip()
            out.append(
                CaseRequest(
                    rid,
                    float(arr) if arr else None,
                    toks,
                    mt,
                    (row.get("depends_on") or "").strip() or None,
                    float(row.get("delay") or 0),
                )
            )
    return out


def chained_block_hashes(tokens: list[int], block_size: int) -> list[int]:
    """One hash per full block, each covering the whole prefix (values in [1, 2^63 - 1])."""
    out = []
    h = b"root"
    for k in range(len(tokens) // block_size):
        blk = tokens[k * block_size : (k + 1) * block_size]
        h = hashlib.blake2b(h + np.asarray(blk, dtype=np.int64).tobytes(), digest_size=8).digest()
        v = int.from_bytes(h, "little") & (2**63 - 1)
        out.append(v or 1)
    return out


@dataclass
class ReplayResult:
    rows: list[tuple]  # (step, pos, request_id, kind, start, num_tokens)
    prefix_hit: dict[str, int]
    preemptions: dict[str, int]
    evictions: int
    hit_tokens: int


def replay_case(case_dir: Path) -> ReplayResult:
    cfg = json.loads((case_dir / "meta.json").read_text())["config"]
    async_mode = bool(cfg.get("async_scheduling"))
    if cfg.get("policy", "fcfs") != "fcfs" or cfg.get("watermark", 0.0) != 0.0:
        raise NotImplementedError("only fcfs without watermark")
    specs = load_case_workload(case_dir / "workload.csv")
    bs = int(cfg["block_size"])
    n = len(specs)
    apc = bool(cfg["enable_prefix_caching"])
    usable = int(cfg["num_gpu_blocks"]) - 1
    batch_cap = int(cfg["max_num_seqs"])
    max_len = int(cfg["max_model_len"])
    p = SchedParams(
        policy=int(SchedPolicy.VLLM_V1),
        router=int(RouterPolicy.ROUND_ROBIN),
        num_replicas=1,
        pp=1,
        block_size=bs,
        block_shift=block_shift_of(bs),
        usable_blocks=usable,
        watermark_blocks=0,
        batch_size_cap=0,
        batch_size_cap_per_stage=0,
        planned_batch_size=0,
        chunk_size=0,
        max_tokens_in_batch=0,
        max_blocks_per_seq=0,
        max_waiting_iters=0,
        max_num_seqs=batch_cap,
        max_num_batched_tokens=int(cfg["max_num_batched_tokens"]),
        long_prefill_token_threshold=int(cfg["long_prefill_token_threshold"]),
        max_model_len=max_len,
        reserve_full_sequence=int(bool(cfg["scheduler_reserve_full_isl"])),
        enable_prefix_caching=int(apc),
        async_scheduling=int(async_mode),
    )
    # hash lists cover prompt + output (the outputs are known in advance)
    hashes = [
        chained_block_hashes(s.tokens + [_output_token(s.rid, j) for j in range(s.max_tokens)], bs)
        for s in specs
    ]
    counts = np.array([len(h) for h in hashes], dtype=np.int64)
    hash_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=hash_off[1:])
    flat = np.array([v for h in hashes for v in h], dtype=np.int64)
    prompt = np.array([len(s.tokens) for s in specs], dtype=np.int64)
    decode = np.array([s.max_tokens for s in specs], dtype=np.int64)
    reqs = alloc_reqs(np.zeros(n, np.int64), prompt, decode, np.full(n, -1), hash_off, flat)
    slots = 2 if async_mode else 1
    reps = alloc_reps(1, 1, batch_cap, slots)
    kv = alloc_kv(1, n, batch_cap, usable if apc else 0, -(-max_len // bs) + 1)
    cl = closed_loop_state(None, n)  # open loop: arrivals are fed by this driver
    hist = alloc_hist()

    time_mode = cfg["arrival"] == "time"
    base, per_tok = float(cfg["step_time_base"]), float(cfg["step_time_per_token"])
    dependents: dict[str, list[int]] = {}
    ready: list[tuple[float, int]] = []
    for k, s in enumerate(specs):
        if s.depends_on:
            dependents.setdefault(s.depends_on, []).append(k)
        else:
            ready.append((s.arrival, k))
    rows: list[tuple] = []
    step, clock, done, flush = 0, 0.0, 0, False
    queue: list[tuple[int, int, int]] = []  # (slot, step, requests) formed, not yet applied
    # one pool, no disaggregation: the cluster router is one route group
    knobs = (p.router, p.router_tolerance_factor, p.router_top_k, p.max_imbalance_tokens)
    pools, pd = one_pool(), no_pd(knobs, 1)

    def apply(slot: int, sstep: int, nb: int) -> None:
        nonlocal done, flush
        if nb == 0:
            return
        was_done = reqs.status == ReqStatus.FINISHED
        now_ns = int(round(clock * NS_PER_S))
        done += _finish_batch_nb(
            reps, kv, reqs, hist, cl, p, pools, pd, 0, slot, now_ns, p.policy, False
        )
        for i in np.flatnonzero((reqs.status == ReqStatus.FINISHED) & ~was_done):
            flush = True
            for dep in dependents.get(specs[i].rid, []):
                d = specs[dep].delay
                ready.append(((clock + d) if time_mode else (sstep + 1 + d), dep))

    while done < n:
        now = clock if time_mode else float(step)
        ready.sort()
        while ready and ready[0][0] <= now + 1e-12:
            _, k = ready.pop(0)
            reqs.status[k] = ReqStatus.WAITING
            reqs.replica[k] = 0
            wq_push_back_nb(reps, reqs, 0, k)
        if reps.run_n[0] == 0 and reps.wq_len[0] == 0 and not flush and not queue:
            nxt = min(ready)[0]
            if time_mode:
                clock = max(clock, nxt)
            else:
                step = max(step, int(nxt))
            continue
        before = reqs.status.copy()
        now_ns = int(round(clock * NS_PER_S))
        slot = ({0, 1} - {q[0] for q in queue}).pop() if async_mode else 0
        nb = schedule_vllm_v1_nb(reps, kv, reqs, p, 0, slot, now_ns)
        ntok = 0
        for pos in range(nb):
            i = int(reps.bat_req[0, slot, pos])
            t = int(reps.bat_tok[0, slot, pos])
            kind = {ReqStatus.WAITING: "new", ReqStatus.PREEMPTED: "resumed"}.get(
                int(before[i]), "running"
            )
            start = int(reqs.processed[i] + reqs.tok_inflight[i]) - t
            rows.append((step, pos, specs[i].rid, kind, start, t))
            ntok += t
        if time_mode and ntok > 0:
            clock += base + per_tok * ntok
        flush = False
        if nb > 0:
            reps.inflight[0] += 1
        queue.append((slot, step, nb))
        if not async_mode:
            apply(*queue.pop(0))
        elif not (len(queue) < 2 and (ntok > 0 or reps.run_n[0] + reps.wq_len[0] > 0)):
            apply(*queue.pop(0))
        step += 1
    return ReplayResult(
        rows,
        {s.rid: int(reqs.cached_tokens[k]) for k, s in enumerate(specs)},
        {s.rid: int(reqs.restarts[k]) for k, s in enumerate(specs)},
        int(kv.evictions[0]),
        int(kv.hit_tokens[0]),
    )
