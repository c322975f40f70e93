"""The kernel engine's pipeline (a batch's stage times computed at formation, a new
micro-batch formed only on routing or on a batch end, at most PP in flight) equals Vidur's
event chain run event by event (tests/reference/vidur_events.py), exactly, on random small
traces with 2 to 4 pipeline stages."""

import numpy as np
import pytest
from vidur_fast.kernels.codes import SchedPolicy
from vidur_fast.kernels.dtypes import NEVER, NS_PER_S

from tests.helpers.random_cases import random_case
from tests.reference.vidur_events import vidur_event_sim
from vidur_fast.engine.run import run_engine

CASES_PER_POLICY = 20
FIELDS = (
    "sched_ns",
    "first_tok_ns",
    "done_ns",
    "restarts",
    "replica",
    "generated",
    "exec_ns",
    "preempt_ns",
    "tbt_n",
    "tbt_sum_ns",
    "tbt_max_ns",
)


def pp_case(policy: SchedPolicy, seed: int):
    """random_case with 2-4 stages, no request rejected up front (Vidur has no such rule);
    one layer per stage so that all stages but the last (which has no send/recv) take the
    same time and stage ends often tie."""
    case, sp, grids, tp = random_case(policy, 1000 + seed)
    pp = 2 + seed % 3
    cap = max(sp.batch_size_cap // sp.pp, 1) * pp
    sp = sp._replace(
        pp=pp,
        batch_size_cap=cap,
        batch_size_cap_per_stage=cap // pp,
        planned_batch_size=cap,
        max_num_seqs=cap,
    )
    tp = tp._replace(pp=pp, layers_per_stage=1)
    return case, sp, grids, tp


@pytest.mark.parametrize("seed", range(CASES_PER_POLICY))
@pytest.mark.parametrize(
    "policy",
    [SchedPolicy.SARATHI, SchedPolicy.VLLM, SchedPolicy.ORCA, SchedPolicy.FASTER_TRANSFORMER],
    ids=lambda p: p.name.lower(),
)
def test_engine_equals_vidur_event_chain(policy, seed):
    case, sp, grids, tp = pp_case(policy, seed)
    n = len(case.arrival_s)
    out = run_engine(
        case.arrival_s,
        case.prompt,
        case.decode,
        case.session,
        np.zeros(n + 1, dtype=np.int64),
        np.zeros(n, dtype=np.uint8),
        grids,
        tp,
        sp,
        case.u_route,
    )
    arrival_ns = np.round(case.arrival_s * NS_PER_S).astype(np.int64)
    ref = vidur_event_sim(
        arrival_ns, case.prompt, case.decode, sp, grids, tp, case.u_route, case.session
    )
    assert all(q.done_ns is not None for q in ref)
    for name in FIELDS:
        want = [NEVER if getattr(q, name) is None else getattr(q, name) for q in ref]
        np.testing.assert_array_equal(getattr(out.reqs, name), want, err_msg=f"{name} ({sp})")
