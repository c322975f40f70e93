"""The time loop: merge arrivals with replica batch ends, form batches, time them."""

import numpy as np
from numba import njit
from vidur_fast.kernels.closed_loop import (
    front_end_nb,
    heap_peek_nb,
    heap_pop_nb,
    release_next_nb,
)
from vidur_fast.kernels.codes import (
    KV_RULE_PER_REQUEST,
    LS_DONE,
    LS_NEXT_REQ,
    LS_NOW,
    LS_STEPS,
    ReqStatus,
    RunStatus,
)
from vidur_fast.kernels.dtypes import NEVER, NO_ID, NS_PER_MS
from vidur_fast.kernels.event_tree import tree_build_nb, tree_set_nb, tree_top_nb
from vidur_fast.kernels.kv import free_request_nb
from vidur_fast.kernels.lifecycle import NO_GAP, hist_add_nb
from vidur_fast.kernels.pd import (
    ROLE_DECODE,
    pd_drain_nb,
    pd_handoff_nb,
    pd_hands_off_nb,
    pd_link_done_nb,
    pd_link_due_nb,
    pd_next_ns_nb,
    pd_route_nb,
    pd_transfer_end_nb,
)
from vidur_fast.kernels.pools import pool_grids_nb, pool_sched_nb, pool_timing_nb
from vidur_fast.kernels.queues import wq_push_back_nb, wq_remove_nb
from vidur_fast.kernels.router import (
    batch_end_nb,
    prefill_end_nb,
    reads_cache,
    request_end_nb,
    route_nb,
)
from vidur_fast.kernels.sched import (
    after_completion_nb,
    after_step_nb,
    apply_output_nb,
    schedule_nb,
    token_kind_nb,
)
from vidur_fast.kernels.state import (
    H_EXEC_NS,
    H_GENERATED,
    H_LAST_STAGE_END_NS,
    H_MODEL_NS,
    H_PREEMPT_NS,
    H_SCHED_NS,
    HOT_VIEWS,
)
from vidur_fast.kernels.timing import ceil_to_nb, host_time_ms_nb, stage_time_ms_nb


def batch_slots(p) -> int:
    """Batches a replica may have in flight: one per pipeline stage, and with vLLM v1 async
    scheduling one more (the next step is formed while the previous one runs)."""
    return p.pp + 1 if p.async_scheduling else p.pp


@njit(cache=True, nogil=True, _nrt=False)
def _replica_next_ns_nb(reps, r):
    """Time of replica r's next event: its pending wake-up or earliest batch end.

    Mutates: nothing.
    Returns: int64 ns (NEVER when idle).
    """
    t = reps.wake[r]
    for s in range(reps.bat_end.shape[1]):
        if reps.bat_end[r, s] < t:
            t = reps.bat_end[r, s]
    return t


@njit(cache=True, nogil=True, _nrt=False)
def _refresh_event_nb(reps, r):
    """Re-key replica r in the event tree after its wake or batch ends changed.

    Mutates: reps.ev_key, reps.ev_node.
    Returns: nothing.
    """
    tree_set_nb(reps.ev_key, reps.ev_node, r, _replica_next_ns_nb(reps, r))


@njit(cache=True, nogil=True, _nrt=False)
def _sync_events_nb(reps):
    """Rebuild the event tree from every replica's wake and batch ends (O(R), once per call).

    Mutates: reps.ev_key, reps.ev_node.
    Returns: nothing.
    """
    for r in range(reps.wake.shape[0]):
        reps.ev_key[r] = _replica_next_ns_nb(reps, r)
    tree_build_nb(reps.ev_key, reps.ev_node)


@njit(cache=True, nogil=True, _nrt=False)
def _engine_next_ns_nb(reps, r0, g):
    """Time of the next event of the DP engine of g ranks from replica r0: the earliest wake
    or batch end of any of its ranks.

    Mutates: nothing.
    Returns: int64 ns (NEVER when idle).
    """
    t = NEVER
    for k in range(g):
        x = _replica_next_ns_nb(reps, r0 + k)
        if x < t:
            t = x
    return t


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _engine_nb(p, pools, r, pools_on):
    """The DP engine of replica r: every dp_group consecutive replicas of its pool, from the
    pool's first (a replica of a pool without lockstep is an engine of one). pools_on: as in
    run_nb.

    Mutates: nothing.
    Returns: (its first rank, its ranks).
    """
    if pools_on:
        q = pools.rep_pool[r]
        g = pools.dp_group[q]
        off = pools.first_rep[q]
    else:
        g = p.dp_group
        off = np.int64(0)
    return off + (r - off) // g * g, g


@njit(cache=True, nogil=True, _nrt=False)
def _refresh_group_nb(reps, p, pools, r, pools_on):
    """Re-key the DP engine of replica r (its first rank holds the engine's event; the other
    ranks stay NEVER).

    Mutates: reps.ev_key, reps.ev_node.
    Returns: nothing.
    """
    r0, g = _engine_nb(p, pools, r, pools_on)
    tree_set_nb(reps.ev_key, reps.ev_node, r0, _engine_next_ns_nb(reps, r0, g))


@njit(cache=True, nogil=True, _nrt=False)
def _sync_group_events_nb(reps, p, pools, pools_on):
    """_sync_events_nb for DP engines: each engine keyed on its first rank.

    Mutates: reps.ev_key, reps.ev_node.
    Returns: nothing.
    """
    for r in range(reps.wake.shape[0]):
        r0, g = _engine_nb(p, pools, r, pools_on)
        reps.ev_key[r] = _engine_next_ns_nb(reps, r, g) if r0 == r else NEVER
    tree_build_nb(reps.ev_key, reps.ev_node)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _batch_features_nb(reps, reqs, tp, p, r, s, policy):
    """Timing features of the batch just formed in slot s of replica r.

    Mutates: nothing.
    Returns: (tokens, decode requests, their kv sum, prefill requests, their kv feature, sum
    of squared prefill chunks, prefill tokens).
    """
    # typed int64 from the start: a literal 0 would make Numba compile stage_time_ms_nb once
    # more for the literal it sees first
    n_tok = np.int64(0)
    n_dec = np.int64(0)
    dec_kv = np.int64(0)
    n_pre = np.int64(0)
    pre_kv = np.int64(0)
    pre_sq = np.int64(0)
    pre_tok = np.int64(0)
    for k in range(reps.bat_n[r, s]):
        i = reps.bat_req[r, s, k]
        n = reps.bat_tok[r, s, k]
        n_tok += n
        decode, kv = token_kind_nb(reqs, p, i, n, policy)
        if decode:
            n_dec += 1
            dec_kv += kv
        else:
            n_pre += 1
            pre_tok += n
            pre_sq += n * n
            if tp.kv_rule == KV_RULE_PER_REQUEST:
                pre_kv += ceil_to_nb(kv, tp.g)
            else:
                pre_kv += kv
    return n_tok, n_dec, dec_kv, n_pre, pre_kv, pre_sq, pre_tok


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _async_step_nb(reps, r, ms, host_ms, now_ns):
    """A step of ms GPU time (host time host_ms included) formed at now on replica r under
    async scheduling: only the host time that outlasts the step in flight delays the GPU.

    Mutates: nothing.
    Returns: (duration ns, end ns).
    """
    dur = np.int64(round(ms * NS_PER_MS))
    if dur < 1:
        dur = 1
    host = np.int64(round(host_ms * NS_PER_MS))
    if host > dur - 1:
        host = dur - 1
    gpu_start = now_ns + host
    if reps.stage_free[r, 0] > gpu_start:
        gpu_start = reps.stage_free[r, 0]
    return dur, gpu_start + dur - host


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _one_stage_step_nb(reps, tp, r, ms, host_ms, now_ns, async_on):
    """A one-stage step of ms GPU time formed at now on replica r (async_on: its host time
    host_ms overlaps the step in flight, _async_step_nb).

    Mutates: nothing.
    Returns: (start, end, execution ns, model ns (without host overhead), start to log).
    """
    cpu_ns = np.int64(round(tp.cpu_overhead_ms * NS_PER_MS))
    start0 = now_ns if now_ns > reps.stage_free[r, 0] else reps.stage_free[r, 0]
    if async_on:
        dur, end = _async_step_nb(reps, r, ms, host_ms, now_ns)
        return start0, end, end - start0, dur - cpu_ns, start0
    dur = np.int64(round(ms * NS_PER_MS))
    if dur < 1:
        dur = 1
    return start0, start0 + dur, dur, dur - cpu_ns, now_ns


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _run_stages_nb(reps, grids, tp, p, r, n_tok, n_dec, dec_kv, n_pre, pre_kv, pre_sq, now_ns):
    """Run a batch formed at now through replica r's pipeline stages.

    Mutates: reps.stage_free, reps.busy_ns, grids.counters.
    Returns: (start of its first stage, end of its last, gaps between stages, execution ns,
    model ns (without host overhead), duration of the first stage, start to log).
    """
    start0 = now_ns if now_ns > reps.stage_free[r, 0] else reps.stage_free[r, 0]
    t = start0
    gaps = 0
    exec_ns = 0
    cpu_ns = np.int64(round(tp.cpu_overhead_ms * NS_PER_MS))
    first_dur = 0
    log_start = now_ns
    if p.async_scheduling:
        # NOTE(vllm): with async scheduling the host work of a step (scheduling, input
        # preparation, output processing) overlaps the step in flight: only the part that
        # outlasts it delays the GPU. pp = 1 here.
        last = np.bool_(True)  # not a literal: one compiled stage_time_ms_nb for both paths
        ms = stage_time_ms_nb(grids, tp, n_tok, n_dec, dec_kv, n_pre, pre_kv, pre_sq, last)
        host_ms = host_time_ms_nb(tp, n_dec + n_pre)
        start0, end, exec_ns, model_ns, log_start = _one_stage_step_nb(
            reps, tp, r, ms, host_ms, now_ns, np.bool_(True)
        )
        reps.stage_free[r, 0] = end
        reps.busy_ns[r, 0] += exec_ns
        return start0, end, gaps, exec_ns, model_ns, exec_ns, log_start
    for st in range(p.pp):
        ms = stage_time_ms_nb(
            grids, tp, n_tok, n_dec, dec_kv, n_pre, pre_kv, pre_sq, st == p.pp - 1
        )
        dur = np.int64(round(ms * NS_PER_MS))
        if dur < 1:
            dur = 1
        if st == 0:
            first_dur = dur
        else:
            begin = t if t > reps.stage_free[r, st] else reps.stage_free[r, st]
            gaps += begin - t
            t = begin
        t += dur
        reps.stage_free[r, st] = t
        reps.busy_ns[r, st] += dur
        exec_ns += dur
    model_ns = exec_ns - cpu_ns * p.pp
    return start0, t, gaps, exec_ns, model_ns, first_dur, log_start


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _account_batch_nb(reps, reqs, r, s, now_ns, start0, end, gaps, exec_ns, model_ns):
    """The requests of the batch in slot s of replica r, launched at now and running from
    start0 to end: first scheduling, time preempted (waiting since their last stage and gaps
    between stages), execution and model time, running.

    Mutates: reqs (hot times, status).
    Returns: nothing.
    """
    for k in range(reps.bat_n[r, s]):
        i = reps.bat_req[r, s, k]
        if reqs.hot[i, H_SCHED_NS] == NEVER:
            reqs.hot[i, H_SCHED_NS] = now_ns
        if reqs.hot[i, H_LAST_STAGE_END_NS] != 0:
            reqs.hot[i, H_PREEMPT_NS] += start0 - reqs.hot[i, H_LAST_STAGE_END_NS]
        reqs.hot[i, H_PREEMPT_NS] += gaps
        reqs.hot[i, H_EXEC_NS] += exec_ns
        reqs.hot[i, H_MODEL_NS] += model_ns
        reqs.hot[i, H_LAST_STAGE_END_NS] = end
        reqs.status[i] = ReqStatus.RUNNING


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _launch_batch_nb(reps, reqs, log, grids, tp, p, pools, r, s, now_ns, policy, pools_on):
    """Time the batch just formed in slot s of replica r with the grids of r's pool (the one
    grids and tp of a one-pool cluster) and account it. pools_on: pools.rep_pool is not empty
    (a constant in the compiled loop: a one-pool loop holds one copy of the timing code).

    Mutates: as _launch_timed_nb.
    Returns: nothing.
    """
    if not pools_on:
        _launch_timed_nb(reps, reqs, log, grids, tp, p, r, s, now_ns, policy)
    else:
        q = pools.rep_pool[r]
        _launch_timed_nb(
            reps,
            reqs,
            log,
            pool_grids_nb(grids, pools, q),
            pool_timing_nb(pools, q),
            p,
            r,
            s,
            now_ns,
            policy,
        )


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _launch_timed_nb(reps, reqs, log, grids, tp, p, r, s, now_ns, policy):
    """Time the batch just formed in slot s through every pipeline stage and account it.

    Mutates: reps (slot end, stages, counters), reqs (timestamps, exec/preempt), log,
    grids.counters.
    Returns: nothing.
    """
    n_tok, n_dec, dec_kv, n_pre, pre_kv, pre_sq, pre_tok = _batch_features_nb(
        reps, reqs, tp, p, r, s, policy
    )
    start0, end, gaps, exec_ns, model_ns, first_dur, log_start = _run_stages_nb(
        reps, grids, tp, p, r, n_tok, n_dec, dec_kv, n_pre, pre_kv, pre_sq, now_ns
    )
    _account_batch_nb(reps, reqs, r, s, now_ns, start0, end, gaps, exec_ns, model_ns)
    reps.bat_end[r, s] = end
    reps.bat_seq[r, s] = reps.n_batches[r]
    reps.bat_npre[r, s] = pre_tok
    reps.n_batches[r] += 1
    reps.inflight[r] += 1
    c = log.n[0]
    log.start_ns[c] = log_start
    log.end_ns[c] = end
    log.replica[c] = r
    log.size[c] = reps.bat_n[r, s]
    log.n_tokens[c] = n_tok
    log.n_prefill_tokens[c] = pre_tok
    log.n_decode_tokens[c] = n_tok - pre_tok
    log.stage_ns[c] = first_dur
    log.alloc_blocks[c] = reps.alloc_blocks[r]
    log.waiting[c] = reps.wq_len[r]
    log.preempted[c] = 0
    log.n_cached_tokens[c] = 0
    log.n[0] = c + 1


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _finish_batch_nb(reps, kv, reqs, hist, cl, p, pools, pd, r, s, now_ns, policy, pd_on):
    """Apply a finished batch: token updates, completions, frees, requeue the rest; in a
    closed loop each completion releases its client's next request. With prefill/decode
    pools (pd_on) a prefill that completes on a prefill replica is handed off (kernels/pd.py).
    policy: p.policy (a constant in the compiled loop, see run_nb).

    Mutates: reps, kv, reqs, hist, cl, pd.
    Returns: requests completed (or -1 on a broken invariant).
    """
    done = 0
    # the batch's token gaps, counted in the histogram a run of equal gaps at a time (the
    # decodes of a batch mostly share one: the step before)
    run_gap = np.int64(NO_GAP)
    run_len = np.int64(0)
    for k in range(reps.bat_n[r, s]):
        i = reps.bat_req[r, s, k]
        n = reps.bat_tok[r, s, k]
        g_before = reqs.hot[i, H_GENERATED]
        complete, gap = apply_output_nb(kv, reqs, p, r, i, n, now_ns, policy)
        if gap != NO_GAP:
            if gap == run_gap:
                run_len += 1
            else:
                if run_len > 0:
                    hist_add_nb(hist, run_gap, run_len)
                run_gap = gap
                run_len = 1
        if pd_on:
            # a prefill ends (a disaggregated request's first token on its decode replica is
            # none); on a decode replica the first step of a hand-off ends
            if (g_before == 0 and reqs.hot[i, H_GENERATED] == 1 and pd.dst[i] != r) or (
                pd.rt.hold[i] != 0 and pd.dst[i] == r
            ):
                prefill_end_nb(reps, reqs, pd.rt, r, i, True)
        elif g_before == 0 and reqs.hot[i, H_GENERATED] == 1:
            prefill_end_nb(reps, reqs, pd.rt, r, i, False)
        if complete and pd_on and pd_hands_off_nb(reqs, pd, r, i):
            if reqs.status[i] == ReqStatus.PREEMPTED:
                # NOTE(vllm): stale output (async) finished a preempted prefill: off the queue
                wq_remove_nb(reps, reqs, r, i)
            else:
                after_completion_nb(reps, p, r, i, policy)
            request_end_nb(reps, pd.rt, r, True)
            pd_handoff_nb(reps, kv, reqs, pd, pools, p, i, now_ns)
        elif complete:
            queued = reqs.status[i] == ReqStatus.PREEMPTED
            reqs.status[i] = ReqStatus.FINISHED
            reqs.done_ns[i] = now_ns
            free_request_nb(reps, kv, reqs, p, r, i, now_ns)
            request_end_nb(reps, pd.rt, r, pd_on)
            done += 1
            if cl.heap_t.shape[0] > 0:
                release_next_nb(cl, reqs, i, now_ns)
            if queued:
                # NOTE(vllm): stale output finished a preempted request: it leaves the queue
                wq_remove_nb(reps, reqs, r, i)
            else:
                after_completion_nb(reps, p, r, i, policy)
        elif not after_step_nb(reps, reqs, p, r, i, reps.bat_seq[r, s], policy):
            return -1
    if run_len > 0:
        hist_add_nb(hist, run_gap, run_len)
    batch_end_nb(reps, pd.rt, r, s, pd_on)
    reps.bat_n[r, s] = 0
    reps.bat_end[r, s] = NEVER
    reps.inflight[r] -= 1
    return done


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _ending_slot_nb(reps, r, t):
    """The batch slot of replica r that ends at t (the earliest formed when several do).

    Mutates: nothing.
    Returns: slot index, or -1.
    """
    s_end = -1
    for s in range(reps.bat_end.shape[1]):
        if reps.bat_end[r, s] == t:
            if s_end < 0 or reps.bat_seq[r, s] < reps.bat_seq[r, s_end]:
                s_end = s
    return s_end


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _free_slot_nb(reps, r, slots_r):
    """The first of replica r's slots_r batch slots with no batch in it.

    Mutates: nothing.
    Returns: slot index, or NO_ID.
    """
    for s in range(slots_r):
        if reps.bat_end[r, s] == NEVER and reps.bat_n[r, s] == 0:
            return s
    return NO_ID


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _form_group_step_nb(reps, kv, reqs, log, p, r0, s, now_ns, policy):
    """Each DP rank of the engine at r0 (p.dp_group ranks) schedules its next step into slot
    s; a rank whose batch has requests gets its batch-log row (times filled at launch).

    Mutates: reps, kv, reqs (scheduling), log (rows of the ranks with requests).
    Returns: requests scheduled over all ranks.
    """
    total = 0
    for k in range(p.dp_group):
        r = r0 + k
        pre0 = reps.preemptions[r]
        hit0 = kv.hit_tokens[r]
        while True:
            pre = reps.preemptions[r]
            n = schedule_nb(reps, kv, reqs, p, r, s, now_ns, policy)
            # a step that only preempted: schedule again at once (an empty step costs 0)
            if n == 0 and reps.preemptions[r] != pre and reps.inflight[r] == 0:
                continue
            break
        if n == 0:
            continue
        total += n
        c = log.n[0]
        log.replica[c] = r
        log.size[c] = n
        log.alloc_blocks[c] = reps.alloc_blocks[r]
        log.waiting[c] = reps.wq_len[r]
        log.preempted[c] = reps.preemptions[r] - pre0
        log.n_cached_tokens[c] = kv.hit_tokens[r] - hit0
        log.n[0] = c + 1
    return total


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _slot_tokens_nb(reps, r, s):
    """Tokens of replica r's batch in slot s.

    Mutates: nothing.
    Returns: int.
    """
    n_tok = np.int64(0)
    for j in range(reps.bat_n[r, s]):
        n_tok += reps.bat_tok[r, s, j]
    return n_tok


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _launch_group_nb(reps, reqs, log, grids, tp, p, r0, s, now_ns, policy, c0):
    """Time the step just formed in slot s by the DP ranks of the engine at r0 and account it
    on every rank; rows c0.. of the log are those of the ranks with requests, in rank order.

    NOTE(vllm): the DP ranks of an engine step together: each pads its tokens to the most any
    rank has (the MoE layers gather every rank's tokens), so the token ops of every rank run at
    that count, each rank's attention at its own requests; the step lasts as long as the
    slowest rank's, and a rank with no requests runs a dummy step (its tokens padded, no
    attention, no sampling) that is not a batch of the log.
    Mutates: reps (slot ends, stages, counters), reqs (times, status), log (rows c0..),
    grids.counters.
    Returns: nothing.
    """
    g = p.dp_group
    n_max = np.int64(0)
    for k in range(g):
        n_tok = _slot_tokens_nb(reps, r0 + k, s)
        if n_tok > n_max:
            n_max = n_tok
    zero = np.int64(0)
    ms = 0.0
    host_ms = 0.0
    for k in range(g):
        r = r0 + k
        # a dummy step's prefill tokens are 0 (the lop_batch_end load reads them)
        reps.bat_npre[r, s] = 0
        if reps.bat_n[r, s] > 0:
            _, n_dec, dec_kv, n_pre, pre_kv, pre_sq, pre_tok = _batch_features_nb(
                reps, reqs, tp, p, r, s, policy
            )
            reps.bat_npre[r, s] = pre_tok
            m = stage_time_ms_nb(
                grids, tp, n_max, n_dec, dec_kv, n_pre, pre_kv, pre_sq, np.bool_(True)
            )
            h = host_time_ms_nb(tp, n_dec + n_pre)
        else:
            m = stage_time_ms_nb(grids, tp, n_max, zero, zero, zero, zero, zero, np.bool_(False))
            h = host_time_ms_nb(tp, zero)
        if m > ms:
            ms = m
        if h > host_ms:
            host_ms = h
    start0, end, exec_ns, model_ns, log_start = _one_stage_step_nb(
        reps, tp, r0, ms, host_ms, now_ns, np.bool_(p.async_scheduling)
    )
    c = c0
    for k in range(g):
        r = r0 + k
        reps.stage_free[r, 0] = end
        reps.busy_ns[r, 0] += exec_ns
        reps.bat_end[r, s] = end
        reps.bat_seq[r, s] = reps.n_batches[r]
        reps.inflight[r] += 1
        if reps.bat_n[r, s] == 0:  # a dummy step
            continue
        n_tok = _slot_tokens_nb(reps, r, s)
        pre_tok = reps.bat_npre[r, s]
        _account_batch_nb(reps, reqs, r, s, now_ns, start0, end, 0, exec_ns, model_ns)
        reps.n_batches[r] += 1
        log.start_ns[c] = log_start
        log.end_ns[c] = end
        log.n_tokens[c] = n_tok
        log.n_prefill_tokens[c] = pre_tok
        log.n_decode_tokens[c] = n_tok - pre_tok
        log.stage_ns[c] = exec_ns
        c += 1


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _group_event_nb(
    reps, kv, reqs, log, hist, cl, grids, tp, p, pools, pd, r0, t_rep, policy, pools_on, pd_on
):
    """The event of the DP engine at r0 at t_rep, with its pool's parameters and grids: every
    rank's step ending now is applied (a decode rank then starts the KV transfers it can
    take), then the ranks form their next steps together while the engine has a free slot.
    pools_on, pd_on: as in run_nb.

    Mutates: as the replica event of _run_loop_nb, on every rank of the engine.
    Returns: requests completed, or -1 on a broken invariant.
    """
    pr = pool_sched_nb(p, pools, r0)  # p with the pool's stages, blocks, limits, engine size
    g = pr.dp_group
    slots_r = pr.pp + 1 if pr.async_scheduling else pr.pp
    done = 0
    for k in range(g):
        r = r0 + k
        s_end = _ending_slot_nb(reps, r, t_rep)
        if s_end >= 0:
            d = _finish_batch_nb(
                reps, kv, reqs, hist, cl, pr, pools, pd, r, s_end, t_rep, policy, pd_on
            )
            if d < 0:
                return -1
            done += d
            if pd_on and pd.role[r] == ROLE_DECODE:
                pd_drain_nb(reps, kv, reqs, pd, pr, pools, r, t_rep)
        reps.wake[r] = NEVER
    log_cap = log.start_ns.shape[0]
    while reps.inflight[r0] < slots_r and log.n[0] + g <= log_cap:
        s_new = _free_slot_nb(reps, r0, slots_r)
        if s_new == NO_ID:
            break
        c0 = log.n[0]
        if _form_group_step_nb(reps, kv, reqs, log, pr, r0, s_new, t_rep, policy) == 0:
            break
        if pools_on:
            q = pools.rep_pool[r0]
            gq = pool_grids_nb(grids, pools, q)
            tq = pool_timing_nb(pools, q)
            _launch_group_nb(reps, reqs, log, gq, tq, pr, r0, s_new, t_rep, policy, c0)
        else:
            _launch_group_nb(reps, reqs, log, grids, tp, pr, r0, s_new, t_rep, policy, c0)
    if reps.inflight[r0] < slots_r and log.n[0] + g > log_cap:
        reps.wake[r0] = t_rep  # resume forming steps after the flush
    _refresh_group_nb(reps, p, pools, r0, pools_on)
    return done


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _run_loop_nb(
    reqs,
    reps,
    kv,
    log,
    run,
    cl,
    grids,
    tp,
    p,
    pools,
    pd,
    limit_ns,
    max_steps,
    policy,
    pools_on,
    pd_on,
    cache_router,
    dp_on,
):
    """Advance the cluster until all requests finish, the time limit passes, the batch log
    fills, or max_steps loop iterations ran. Resumable: all progress lives in the arrays.

    Ties: arrivals at time t are routed before any replica event at t; replica events at the
    same time go in replica-id order; batch slots of one replica by end time then formation.
    The earliest replica comes from a tournament tree (O(log R)): whenever a replica's wake
    or bat_end changes, _refresh_event_nb must re-key it before the next selection.
    Arrivals come in index order (open loop) or, when cl has clients, from cl's heap of
    released requests (closed loop; equal arrival times in request-id order).
    pools (kernels/pools.py): with several pools, each replica schedules with its pool's
    stages and KV blocks and times its batches with its pool's grids; empty = one pool.
    pd (kernels/pd.py): with prefill/decode pools, arrivals go to the prefill replicas and
    KV transfers end as a third kind of event, before arrivals and replica events at the
    same time (equal ends in request-id order); with fair-share contention a transfer's last
    byte leaving its link comes before those (equal times by link id, then request id);
    arrivals and hand-offs are routed by pd.rt's router groups (also in a cluster of mixed
    pools with routers of their own: every replica mixed, no transfers); empty = no
    disaggregation, and pd.rt the one route group of the cluster router over all replicas
    (router.cluster_group, routed by router.route_nb).
    DP engines (dp_on): every dp_group consecutive replicas of a pool (p.dp_group, or each
    pool's pools.dp_group) are the ranks of one engine, keyed in the event tree on its first
    rank; its event (_group_event_nb) applies and forms the steps of all its ranks together.
    policy, pools_on, pd_on, cache_router and dp_on (p.policy, pools.rep_pool.shape[0] > 0,
    pd.role.shape[0] > 0, router.reads_cache(p.router), p.dp_group > 1) are constants of the
    compiled loop (loop_kernel): the branches of other schedulers, those of several pools,
    of disaggregation or of DP engines when the run has none, and the cache look-ups of
    routing when the router makes none, are dropped before typing.
    Mutates: reqs, reps, kv, log, run (loop cursor, TBT histogram), cl,
    grids.counters, pd.
    Returns: a RunStatus.
    """
    lstate = run.loop
    hist = run.tbt_hist
    n = reqs.arrival_ns.shape[0]
    log_cap = log.start_ns.shape[0]
    closed = cl.heap_t.shape[0] > 0
    slots = reps.bat_end.shape[1]  # batches a replica may have in flight (batch_slots)
    if dp_on:
        _sync_group_events_nb(reps, p, pools, pools_on)
    else:
        _sync_events_nb(reps)
    for _ in range(max_steps):
        lstate[LS_STEPS] += 1
        if closed:
            nr, t_arr = heap_peek_nb(cl)
        else:
            nr = lstate[LS_NEXT_REQ]
            t_arr = reqs.arrival_ns[nr] if nr < n else NEVER
        r, t_rep = tree_top_nb(reps.ev_key, reps.ev_node)
        t_x = pd_next_ns_nb(pd) if pd_on else NEVER
        if t_arr == NEVER and t_rep == NEVER and t_x == NEVER:
            return RunStatus.DONE
        t_next = t_arr if t_arr <= t_rep else t_rep
        if t_x < t_next:
            t_next = t_x
        if limit_ns > 0 and t_next > limit_ns:
            return RunStatus.TIME_LIMIT
        if pd_on and t_x == t_next:
            lstate[LS_NOW] = t_x
            if pd_link_due_nb(pd, t_x):  # a last byte leaves a fair-share link
                pd_link_done_nb(pd, t_x)
                continue
            i_x, r_src, r_dst = pd_transfer_end_nb(reps, kv, reqs, pd, p, pools, t_x)
            for rw in (r_src, r_dst):
                if reps.inflight[rw] < pools.pp[pools.rep_pool[rw]] and reps.wake[rw] == NEVER:
                    reps.wake[rw] = t_x
                    if dp_on:
                        _refresh_group_nb(reps, p, pools, rw, pools_on)
                    else:
                        _refresh_event_nb(reps, rw)
            continue
        if t_arr <= t_rep:
            if closed:
                heap_pop_nb(cl)
                if not front_end_nb(cl, nr, t_arr):
                    continue
            lstate[LS_NEXT_REQ] = nr + 1
            lstate[LS_NOW] = t_arr
            if reqs.rejected[nr] != 0:
                if closed:  # the client gets its error at once and goes on
                    release_next_nb(cl, reqs, nr, t_arr)
                continue
            if pd_on:
                rr = pd_route_nb(reps, kv, reqs, pd, p, nr, t_arr)
            else:
                rr = route_nb(reps, kv, reqs, pd.rt, p, nr, t_arr, cache_router)
            reqs.replica[nr] = rr
            reqs.status[nr] = ReqStatus.WAITING
            wq_push_back_nb(reps, reqs, rr, nr)
            # NOTE(vllm): with async scheduling a replica with a step in flight is waiting for
            # that step's output (EngineCore.step_with_batch_queue), not for input
            pp_rr = pools.pp[pools.rep_pool[rr]] if pools_on else p.pp
            if reps.inflight[rr] < pp_rr and reps.wake[rr] == NEVER:
                reps.wake[rr] = t_arr
                if dp_on:
                    _refresh_group_nb(reps, p, pools, rr, pools_on)
                else:
                    _refresh_event_nb(reps, rr)
            continue
        if dp_on:
            # r is the first rank of its engine (the event tree keys engines there); an
            # engine of one rank is a replica and takes the replica event below
            _, g = _engine_nb(p, pools, r, pools_on)
            if g > 1:
                if log.n[0] + slots * g > log_cap:
                    return RunStatus.LOG_FULL
                lstate[LS_NOW] = t_rep
                d = _group_event_nb(
                    reps, kv, reqs, log, hist, cl, grids, tp, p, pools, pd, r, t_rep, policy,
                    pools_on, pd_on,
                )  # fmt: skip
                if d < 0:
                    return RunStatus.BROKEN
                lstate[LS_DONE] += d
                continue
        if log.n[0] + slots > log_cap:
            return RunStatus.LOG_FULL
        lstate[LS_NOW] = t_rep
        pr = pool_sched_nb(p, pools, r)  # p with replica r's pool's stages and KV blocks
        slots_r = pr.pp + 1 if pr.async_scheduling else pr.pp
        s_end = _ending_slot_nb(reps, r, t_rep)
        if s_end >= 0:
            d = _finish_batch_nb(
                reps, kv, reqs, hist, cl, pr, pools, pd, r, s_end, t_rep, policy, pd_on
            )
            if d < 0:
                return RunStatus.BROKEN
            lstate[LS_DONE] += d
            if pd_on and pd.role[r] == ROLE_DECODE:
                pd_drain_nb(reps, kv, reqs, pd, pr, pools, r, t_rep)
        reps.wake[r] = NEVER
        # preemptions of steps that formed no batch are logged with the next batch formed
        pre_logged = reps.preemptions[r]
        while reps.inflight[r] < slots_r and log.n[0] < log_cap:
            s_new = _free_slot_nb(reps, r, slots_r)
            if s_new == NO_ID:
                break
            pre0 = reps.preemptions[r]
            hit0 = kv.hit_tokens[r]  # requests admitted into this batch add their hits
            if schedule_nb(reps, kv, reqs, pr, r, s_new, t_rep, policy) == 0:
                # a step that only preempted: schedule again at once (an empty step costs 0)
                if reps.preemptions[r] != pre0 and reps.inflight[r] == 0:
                    continue
                break
            _launch_batch_nb(
                reps, reqs, log, grids, tp, pr, pools, r, s_new, t_rep, policy, pools_on
            )
            log.preempted[log.n[0] - 1] = reps.preemptions[r] - pre_logged
            log.n_cached_tokens[log.n[0] - 1] = kv.hit_tokens[r] - hit0
            pre_logged = reps.preemptions[r]
        if reps.inflight[r] < slots_r and log.n[0] >= log_cap:
            # resume scheduling this replica after the flush
            reps.wake[r] = t_rep
        _refresh_event_nb(reps, r)
    return RunStatus.MAX_STEPS


def _loop_entry(policy: int, pools_on: bool, pd_on: bool, cache_router: bool, dp_on: bool):
    """A compiled loop for one scheduler policy, with or without several pools and PD pools,
    for the cluster routers that read the prefix caches or for the others (cached on disk;
    each variant is its own entry in Numba's cache)."""

    @njit(cache=True, nogil=True, _nrt=False)
    def run_nb(reqs, reps, kv, log, run, cl, grids, tp, p, pools, pd, limit_ns, max_steps):
        return _run_loop_nb(
            reqs,
            reps,
            kv,
            log,
            run,
            cl,
            grids,
            tp,
            p,
            pools,
            pd,
            limit_ns,
            max_steps,
            policy,
            pools_on,
            pd_on,
            cache_router,
            dp_on,
        )

    return run_nb


_ENTRIES: dict = {}


def loop_kernel(policy: int, pools_on: bool, pd_on: bool, router: int, dp_on: bool = False):
    """The compiled loop (a Numba dispatcher) for scheduler policy (codes.SchedPolicy), with
    (pools_on) or without several pools, with (pd_on) or without prefill/decode pools, for
    cluster router `router` (codes.RouterPolicy), and with (dp_on: SchedParams.dp_group > 1,
    the largest of the pools') or without DP engines whose ranks step in lockstep: one loop
    serves the routers that read the prefix caches (router.CACHE_ROUTERS), one the others;
    with PD pools the route groups of kernels/pd.py route and the router does not matter.
    Only that scheduler's kernels, the cache look-ups of routing only for those routers, and
    the pool, PD and DP code only when on, are typed and compiled: a first run compiles what
    its configuration uses."""
    key = (int(policy), bool(pools_on), bool(pd_on), not pd_on and reads_cache(router))
    if dp_on:  # keys of the other variants stay 4 long (the recorded plan names them)
        key += (True,)
    k = _ENTRIES.get(key)
    if k is None:
        k = _ENTRIES[key] = _loop_entry(*key[:4], len(key) > 4)
    return k


def loop_arg_types(args: tuple) -> tuple:
    """Numba's types of the loop's arguments (run_nb's, reqs first) as the loop is compiled
    for them: as a call types them, but with the strided views of reqs.hot (HOT_VIEWS)
    typed 'A' whatever the request count. numpy calls an array of one element (or none)
    contiguous, so a call would type them 'C' in a one-request run and compile a loop of
    its own."""
    from numba import typeof
    from numba.core import types
    from numba.core.typing.typeof import Purpose

    found = [typeof(a, Purpose.argument) for a in args]
    reqs = found[0]
    fields = [
        t.copy(layout="A") if name in HOT_VIEWS else t
        for name, t in zip(args[0]._fields, reqs.types, strict=True)
    ]
    found[0] = types.NamedTuple(fields, reqs.instance_class)
    return tuple(found)


def run_nb(reqs, reps, kv, log, run, cl, grids, tp, p, pools, pd, limit_ns, max_steps):
    """Run the simulation loop (_run_loop_nb) compiled for p.policy, several pools or one
    (pools.rep_pool empty), PD pools or none (pd.role empty), p.router and DP engines or none
    (p.dp_group). Returns: a RunStatus."""
    kernel = loop_kernel(
        p.policy, pools.rep_pool.shape[0] > 0, pd.role.shape[0] > 0, p.router, p.dp_group > 1
    )
    args = (reqs, reps, kv, log, run, cl, grids, tp, p, pools, pd, limit_ns, max_steps)
    # the views are strided: a call types them as loop_arg_types (or the kernels run as
    # Python, NUMBA_DISABLE_JIT, with no types at all)
    if reqs.hot.shape[0] > 1 or not hasattr(kernel, "compile"):
        return kernel(*args)
    # one request or none: the loop compiled (or cached) for strided views, given these
    return kernel.compile(loop_arg_types(args))(*args)
