"""Engine invariants over many small random clusters and workloads (hypothesis).

Drives run_engine directly on linear timing grids, for every scheduler and router:
- each request completes exactly once, or is rejected up front with a reason and never routed;
- allocated KV blocks never exceed a replica's capacity and are all freed at the end;
- arrival <= first scheduled < first token <= completion; decoded tokens == requested;
- restarts >= 0 and preemptions agree between requests, replicas and the batch log;
- router load counters (lor / lop) return to zero.

Example counts come from a hypothesis profile chosen by $HYPOTHESIS_PROFILE: `default`
(INVARIANT_EXAMPLES per scheduler), `ci` (more) or `nojit` (few, for NUMBA_DISABLE_JIT=1 runs).
"""

import os
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vidur_fast.kernels.codes import ReqStatus, RouterPolicy, RunStatus, SchedPolicy
from vidur_fast.kernels.dtypes import NEVER
from vidur_fast.kernels.state import SchedParams, block_shift_of
from vidur_fast.kernels.timing import TimingParams

from tests.helpers.engine_harness import GC, PLAIN_ROUTERS, G, linear_grids
from vidur_fast.engine.run import run_engine
from vidur_fast.params.memory import MemoryPlan
from vidur_fast.params.setup import REJECT_REASONS, EngineSetup, rejection_codes

EXAMPLES = {"default": 200, "ci": 1000, "nojit": 100}
_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
for _name, _n in EXAMPLES.items():
    # default and nojit always draw the same examples; ci explores new ones on every run
    # (hypothesis prints a failing example and its seed)
    settings.register_profile(
        f"invariants-{_name}", max_examples=_n, derandomize=_name != "ci", **_COMMON
    )
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
if PROFILE not in EXAMPLES:
    PROFILE = "default"
SETTINGS = settings.get_profile(f"invariants-{PROFILE}")

SCHEDULERS = (
    SchedPolicy.VLLM_V1,
    SchedPolicy.SARATHI,
    SchedPolicy.VLLM,
    SchedPolicy.ORCA,
    SchedPolicy.FASTER_TRANSFORMER,
    SchedPolicy.LIGHTLLM,
)
ROUTERS = PLAIN_ROUTERS
RAN: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report_examples(request):
    yield
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is None or capture is None or not RAN:
        return
    counts = ", ".join(f"{SchedPolicy(p).name.lower()}={n}" for p, n in sorted(RAN.items()))
    with capture.global_and_fixture_disabled():
        tr.write_line(f"\ninvariants (profile {PROFILE}): examples per scheduler: {counts}")


@st.composite
def clusters(draw, policy: int):
    """(SchedParams, EngineSetup, requests) for one small random cluster and workload."""
    v1 = policy == SchedPolicy.VLLM_V1
    lightllm = policy == SchedPolicy.LIGHTLLM
    pp = 1 if v1 or lightllm else draw(st.sampled_from((1, 1, 2)))
    block = 1 if lightllm else draw(st.sampled_from((1, 4, 16)))
    batch_cap = draw(st.integers(pp, 8))
    max_tokens = draw(st.integers(1, 40)) * block  # orca / ft reservation, legacy bound
    blocks = draw(st.integers(max(2, max_tokens // block), 120))
    chunk = draw(st.integers(1, 300))
    max_model_len = draw(st.sampled_from((0, 0, 64, 400))) if v1 else 0
    wm_frac = draw(st.sampled_from((0.0, 0.0, 0.1)))
    p = SchedParams(
        policy=int(policy),
        router=int(draw(st.sampled_from(ROUTERS))),
        num_replicas=draw(st.integers(1, 3)),
        pp=pp,
        block_size=block,
        block_shift=block_shift_of(block),
        usable_blocks=blocks,
        watermark_blocks=int(wm_frac * blocks)
        if policy in (SchedPolicy.SARATHI, SchedPolicy.VLLM)
        else 0,
        batch_size_cap=batch_cap,
        batch_size_cap_per_stage=batch_cap // pp,
        planned_batch_size=batch_cap,
        chunk_size=chunk,
        max_tokens_in_batch=draw(st.integers(1, 600)),
        max_blocks_per_seq=max_tokens // block,
        max_waiting_iters=draw(st.integers(1, 5)) if lightllm else 0,
        max_num_seqs=batch_cap,
        max_num_batched_tokens=chunk,
        long_prefill_token_threshold=draw(st.sampled_from((0, 0, 7, 50))) if v1 else 0,
        max_model_len=max_model_len,
        reserve_full_sequence=draw(st.integers(0, 1)) if v1 else 0,
        enable_prefix_caching=draw(st.integers(0, 1)) if v1 else 0,
        async_scheduling=draw(st.integers(0, 1)) if v1 else 0,
    )
    if v1:
        bound = max_model_len
    elif policy in (SchedPolicy.ORCA, SchedPolicy.FASTER_TRANSFORMER):
        bound = max_tokens
    else:
        bound = 0
    setup = EngineSetup(p, MemoryPlan(0, 0, 0, blocks, 0, 0), block, bound)
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.sampled_from((0.0, 0.0005, 0.002, 0.01, 0.05)), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    decode = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    u = draw(st.lists(st.floats(0.0, 0.999), min_size=n, max_size=n))
    reqs = (np.cumsum(gaps), np.array(prompt), np.array(decode), np.array(u))
    return p, setup, reqs


def _run(p, setup, reqs):
    arrival, prompt, decode, u = reqs
    n = arrival.shape[0]
    rejected = rejection_codes(prompt, decode, setup)
    tp = TimingParams(G, GC, 2 // p.pp, 0.0, 0.0, 0.0, 1, 1, p.pp)
    out = run_engine(
        arrival,
        prompt,
        decode,
        np.full(n, -1),
        np.zeros(n + 1, dtype=np.int64),
        rejected,
        linear_grids(),
        tp,
        p,
        u,
    )
    return out, rejected


def check_invariants(p, out, rejected, prompt, decode) -> None:
    r, reps, b = out.reqs, out.reps, out.batches
    live = rejected == 0
    assert out.status == "done"
    # rejected: a known reason, never routed; every other request completes exactly once
    assert set(np.unique(rejected[~live]).tolist()) <= set(REJECT_REASONS)
    assert (r.status[~live] == ReqStatus.PENDING).all()
    assert (r.replica[~live] == -1).all() and (r.done_ns[~live] == NEVER).all()
    assert (r.status[live] == ReqStatus.FINISHED).all()
    assert (r.done_ns[live] != NEVER).all()
    assert int(np.bincount(r.replica[live], minlength=p.num_replicas).sum()) == int(live.sum())
    # KV capacity and leaks
    assert (b["alloc_blocks"].to_numpy() <= p.usable_blocks).all()
    assert (reps.kv_peak <= p.usable_blocks).all()
    assert (reps.alloc_blocks == 0).all(), "KV blocks leaked"
    assert (reps.alloc_reqs == 0).all()
    assert (r.blocks == 0).all()
    # lifecycle order and token counts
    a, s, f, d = r.arrival_ns[live], r.sched_ns[live], r.first_tok_ns[live], r.done_ns[live]
    assert (a <= s).all() and (s < f).all() and (f <= d).all()
    assert (r.generated[live] == decode[live]).all()
    assert (r.generated[~live] == 0).all()
    done_computed = r.processed[live] >= prompt[live]
    if p.async_scheduling:
        # async: a preempted request (computed tokens reset) may be finished by the output of
        # the step that was in flight when it was preempted, as vLLM does
        done_computed |= r.restarts[live] > 0
    assert done_computed.all()
    # preemptions counted consistently
    assert (r.restarts >= 0).all()
    assert int(r.restarts.sum()) == int(reps.preemptions.sum())
    # the batch log attributes a preemption to the next batch its replica forms in the same
    # event; one whose step formed no batch and ended the event is only in the replica count
    assert 0 <= int(b["preemptions"].sum()) <= int(reps.preemptions.sum())
    assert int(reps.n_batches.sum()) == len(b)
    # every pipeline stage drained; router load back to zero
    assert (reps.inflight == 0).all() and (reps.run_n == 0).all() and (reps.wq_len == 0).all()
    if p.router in (RouterPolicy.LOR, RouterPolicy.LOP):
        assert (reps.pending == 0).all()


@pytest.mark.parametrize("policy", SCHEDULERS, ids=lambda x: SchedPolicy(x).name.lower())
def test_engine_invariants(policy):
    @SETTINGS
    @given(case=clusters(policy))
    def check(case):
        p, setup, reqs = case
        RAN[int(policy)] += 1
        out, rejected = _run(p, setup, reqs)
        check_invariants(p, out, rejected, reqs[1], reqs[2])

    check()


def test_rejections_only_for_requests_that_cannot_fit():
    # a 10-block replica of 16-token blocks: 160 tokens fit, 161 do not
    p, setup, _ = _fixed_v1(num_blocks=10)
    prompt, decode = np.array([150, 150, 5]), np.array([10, 11, 1])
    codes = rejection_codes(prompt, decode, setup)
    assert codes.tolist() == [0, 1, 0]
    out, rejected = _run(p, setup, (np.zeros(3), prompt, decode, np.zeros(3)))
    check_invariants(p, out, rejected, prompt, decode)


def test_vllm_v0_rejects_prompts_longer_than_a_prefill_batch():
    from tests.helpers.engine_harness import params

    p = params(SchedPolicy.VLLM, max_tokens_in_batch=100)
    setup = EngineSetup(p, MemoryPlan(0, 0, 0, p.usable_blocks, 0, 0), 16, 0)
    prompt, decode = np.array([100, 101]), np.array([5, 5])
    assert rejection_codes(prompt, decode, setup).tolist() == [0, 3]
    out, rejected = _run(p, setup, (np.zeros(2), prompt, decode, np.zeros(2)))
    check_invariants(p, out, rejected, prompt, decode)


def _fixed_v1(num_blocks):
    from tests.helpers.engine_harness import params

    p = params(SchedPolicy.VLLM_V1, num_blocks=num_blocks)
    return p, EngineSetup(p, MemoryPlan(0, 0, 0, num_blocks, 0, 0), 16, 0), None


def test_a_livelocked_engine_raises_instead_of_hanging(monkeypatch):
    import vidur_fast.engine.run as engine_run

    monkeypatch.setattr(engine_run.loop, "run_nb", lambda *a: RunStatus.MAX_STEPS)
    p, setup, _ = _fixed_v1(num_blocks=10)
    with pytest.raises(RuntimeError, match="no progress"):
        _run(p, setup, (np.zeros(1), np.array([5]), np.array([2]), np.zeros(1)))


@pytest.mark.parametrize("policy", [SchedPolicy.SARATHI, SchedPolicy.VLLM], ids=["sarathi", "vllm"])
def test_restart_grown_into_the_watermark_still_completes(policy):
    # the 282-token request is preempted after its prefill; its
    # recomputed prompt (prompt + generated) then needs more than num_blocks - watermark
    from tests.helpers.engine_harness import params

    p = params(policy, num_blocks=78, block_size=4, batch_cap=1, chunk=1, watermark=7)
    p = p._replace(max_tokens_in_batch=282)
    setup = EngineSetup(p, MemoryPlan(0, 0, 0, 78, 0, 0), 4, 0)
    prompt, decode = np.array([1] * 8 + [282, 1]), np.array([1] * 8 + [29, 1])
    out, rejected = _run(p, setup, (np.zeros(10), prompt, decode, np.zeros(10)))
    check_invariants(p, out, rejected, prompt, decode)
    assert out.reqs.restarts[8] == 1
