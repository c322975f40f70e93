"""The loop's view of the replica schedulers: one dispatch on the policy per question the loop
asks (form a batch, what its tokens are for timing, apply its output, what happens to a
request after it), so that the loop itself holds no policy rules.

Each takes the policy (SchedParams.policy) as its own argument: the loop passes a constant
(kernels/loop.py compiles one loop per scheduler), so Numba drops the other schedulers'
branches before typing and compiles only the chosen scheduler's kernels. Called with a runtime
value, every branch stays.
"""

from numba import njit
from vidur_fast.kernels.codes import SchedPolicy
from vidur_fast.kernels.lifecycle import advance_legacy_nb
from vidur_fast.kernels.sched_legacy import (
    is_decode_legacy_nb,
    requeue_after_batch_legacy_nb,
    schedule_faster_transformer_nb,
    schedule_orca_nb,
    schedule_sarathi_nb,
    schedule_vllm_nb,
)
from vidur_fast.kernels.sched_lightllm import schedule_lightllm_nb
from vidur_fast.kernels.sched_v1 import (
    apply_output_v1_nb,
    is_decode_v1_nb,
    kv_before_v1_nb,
    leave_running_v1_nb,
    schedule_vllm_v1_nb,
)
from vidur_fast.kernels.state import (
    H_PROCESSED,
)

# plain ints (not enum attributes), so that Numba can fold `policy == _V1` for a constant policy
_VLLM = int(SchedPolicy.VLLM)
_SARATHI = int(SchedPolicy.SARATHI)
_ORCA = int(SchedPolicy.ORCA)
_LIGHTLLM = int(SchedPolicy.LIGHTLLM)
_V1 = int(SchedPolicy.VLLM_V1)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def schedule_nb(reps, kv, reqs, p, r, s, now_ns, policy):
    """Form the next batch of replica r in slot s with the scheduler policy (p.policy).

    Mutates: reps, kv, reqs.
    Returns: requests in the new batch.
    """
    if policy == _SARATHI:
        return schedule_sarathi_nb(reps, reqs, p, r, s, now_ns)
    if policy == _V1:
        return schedule_vllm_v1_nb(reps, kv, reqs, p, r, s, now_ns)
    if policy == _VLLM:
        return schedule_vllm_nb(reps, reqs, p, r, s, now_ns)
    if policy == _ORCA:
        return schedule_orca_nb(reps, reqs, p, r, s, now_ns)
    if policy == _LIGHTLLM:
        return schedule_lightllm_nb(reps, reqs, p, r, s, now_ns)
    return schedule_faster_transformer_nb(reps, reqs, p, r, s, now_ns)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def token_kind_nb(reqs, p, i, n, policy):
    """How request i's n tokens in the batch just formed enter the timing features.

    Mutates: nothing.
    Returns: (counts as decode, tokens of the request computed before them).
    """
    if policy == _V1:
        return is_decode_v1_nb(reqs, i, n), kv_before_v1_nb(reqs, i, n)
    return is_decode_legacy_nb(reqs, i), reqs.hot[i, H_PROCESSED]


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def apply_output_nb(kv, reqs, p, r, i, n, now_ns, policy):
    """Apply request i's n tokens of a batch that just ended on replica r.

    Mutates: reqs, kv.
    Returns: (True when the request completed, the gap its token closes for the TBT
    histogram, or lifecycle.NO_GAP).
    """
    if policy == _V1:
        return apply_output_v1_nb(kv, reqs, p, r, i, n, now_ns)
    return advance_legacy_nb(reqs, i, n, now_ns)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def after_completion_nb(reps, p, r, i, policy):
    """Scheduler bookkeeping once request i (not queued) completed on replica r.

    Mutates: reps.run, reps.run_n (vLLM v1).
    Returns: nothing.
    """
    if policy == _V1:
        leave_running_v1_nb(reps, r, i)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def after_step_nb(reps, reqs, p, r, i, batch_seq, policy):
    """Scheduler bookkeeping for request i, not complete, after its batch (formed as number
    batch_seq) ended on replica r: Vidur's schedulers put it back on the running list.

    Mutates: reps.run, reps.run_n, reqs.group (Vidur's schedulers).
    Returns: False if the running list overflowed (broken invariant).
    """
    if policy == _V1:
        return True
    return requeue_after_batch_legacy_nb(reps, reqs, r, i, batch_seq)
