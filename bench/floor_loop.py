"""The floor: a bare jitted chunked-prefill loop over a workload, with no memory model, no
timing model and no metrics, to show how far the simulator's loop is above the cheapest loop
that still steps every request through every iteration.

Requests go round-robin to the replicas (so replicas are independent and each is run to the
end in turn: no event ordering across replicas). A replica's step admits arrived requests up
to max_num_seqs, gives each running request in decode one token and each request in prefill
a chunk of what is left of the step's token budget (in admission order), and lasts
base + per_token * tokens. Finished requests leave the batch at the end of the step.

    python bench/floor_loop.py            # the synth1m workload of run_all.py, one line of JSON

run_all.py prints it as its `floor` row.
"""

import numpy as np
from numba import njit


# Without Numba's runtime (no allocation in the kernels, as the simulator's own): it runs
# under the simulator's start-up (jit_start.start_numba_target), whose cache loads do not set
# the runtime up, and a cached kernel that needs it crashes there.
@njit(cache=True, nogil=True, _nrt=False)
def _replica(
    arrival_ns, prompt, decode, first, stride, budget, max_seqs, base_ns, tok_ns, done, slots
):
    """Run one replica's requests (first, first + stride, ...) to completion; write each
    request's finish time into done; return (steps, request-iterations). slots: int64[3,
    max_seqs] scratch (request, prompt tokens still to prefill, output tokens still to
    generate)."""
    n_all = arrival_ns.shape[0]
    slot_req = slots[0]
    slot_pre = slots[1]
    slot_dec = slots[2]
    nxt = first
    nrun = 0
    now = 0
    steps = 0
    iters = 0
    while nxt < n_all or nrun > 0:
        if nrun == 0 and arrival_ns[nxt] > now:
            now = arrival_ns[nxt]
        while nxt < n_all and nrun < max_seqs and arrival_ns[nxt] <= now:
            slot_req[nrun] = nxt
            slot_pre[nrun] = prompt[nxt]
            slot_dec[nrun] = decode[nxt]
            nrun += 1
            nxt += stride
        tokens = 0
        for s in range(nrun):
            if slot_pre[s] > 0:
                take = min(slot_pre[s], budget - tokens)
                slot_pre[s] -= take
                tokens += take
                if slot_pre[s] == 0:
                    slot_dec[s] -= 1  # the first output token comes with the last chunk
            else:
                slot_dec[s] -= 1
                tokens += 1
        iters += nrun
        steps += 1
        now += base_ns + tok_ns * tokens
        s = 0
        while s < nrun:
            if slot_pre[s] == 0 and slot_dec[s] <= 0:
                done[slot_req[s]] = now
                nrun -= 1
                slot_req[s] = slot_req[nrun]
                slot_pre[s] = slot_pre[nrun]
                slot_dec[s] = slot_dec[nrun]
            else:
                s += 1
    return steps, iters


@njit(cache=True, nogil=True, _nrt=False)
def floor_loop(
    arrival_ns, prompt, decode, replicas, budget, max_seqs, base_ns, tok_ns, done, slots
):
    """Every replica in turn; (steps, request-iterations) summed over replicas."""
    steps = 0
    iters = 0
    for r in range(replicas):
        a, b = _replica(
            arrival_ns, prompt, decode, r, replicas, budget, max_seqs, base_ns, tok_ns, done, slots
        )
        steps += a
        iters += b
    return steps, iters


# Step time of the floor: a fixed cost plus a cost per token. Chosen so that the synth1m
# workload takes about as many steps as the simulator's run of it (~28.5M), not to model
# any hardware.
BASE_NS = 7_000_000
TOKEN_NS = 12_000


def run_floor(arrival_s, prompt, decode, replicas: int, budget: int, max_seqs: int) -> dict:
    """Load (or compile) the kernel on a tiny input, then time it on the workload."""
    import time

    from vidur_fast.jit_start import start_numba_target

    arrival_ns = np.round(np.asarray(arrival_s, dtype=np.float64) * 1e9).astype(np.int64)
    prompt = np.ascontiguousarray(prompt, dtype=np.int64)
    decode = np.ascontiguousarray(decode, dtype=np.int64)
    done = np.zeros(arrival_ns.shape[0], dtype=np.int64)
    slots = np.zeros((3, max_seqs), dtype=np.int64)
    t = time.perf_counter()
    start_numba_target()  # as the simulator does before its first kernel
    floor_loop(arrival_ns[:2], prompt[:2], decode[:2], 1, budget, max_seqs, 1, 1, done[:2], slots)
    jit_s = time.perf_counter() - t
    t, c = time.perf_counter(), time.thread_time()
    steps, iters = floor_loop(
        arrival_ns, prompt, decode, replicas, budget, max_seqs, BASE_NS, TOKEN_NS, done, slots
    )
    loop_s, loop_cpu_s = time.perf_counter() - t, time.thread_time() - c
    return {
        "requests": int(arrival_ns.shape[0]),
        "replicas": replicas,
        "steps": int(steps),
        "request_iterations": int(iters),
        "simulated_s": float(done.max()) / 1e9,
        "jit_s": jit_s,
        "loop_s": loop_s,
        "loop_cpu_s": loop_cpu_s,
    }


def synth1m_floor(shared) -> dict | None:
    """The floor over run_all.py's synth1m workload (same requests, replicas and vllm_v1
    budgets); None when its length trace is missing."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run_all import scenario_config

    from vidur_fast.catalog import get_device, get_model
    from vidur_fast.params.setup import build_setup
    from vidur_fast.workload.build import build_workload

    cfg = scenario_config("synth1m", Path(shared), "unused")
    if cfg is None:
        return None
    wl = build_workload(cfg.workload, cfg.seed)
    sp = build_setup(cfg, get_model(cfg.cluster.model), get_device(cfg.cluster.device)).params
    return run_floor(
        wl.arrival_s,
        wl.prompt_tokens,
        wl.decode_tokens,
        cfg.cluster.num_replicas,
        int(sp.max_num_batched_tokens),
        int(sp.max_num_seqs),
    )


if __name__ == "__main__":
    import argparse
    import json
    from pathlib import Path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    args = ap.parse_args()
    print(json.dumps(synth1m_floor(args.shared)))
