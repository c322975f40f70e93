"""Regenerate the small example traces in traces/examples/ (deterministic, seed fixed).

    .venv/bin/python traces/make_examples.py

Writes Vidur-format CSVs that vidur-fast reads with `TraceWorkload(path)`; see traces/README.md.
"""

from pathlib import Path

import numpy as np

from vidur_fast.workload import (
    PoissonIntervals,
    SyntheticWorkload,
    UniformLengths,
    build_workload,
    make_table,
    write_vidur_csv,
)

OUT = Path(__file__).resolve().parent / "examples"
BLOCK = 16
SEED = 20240601


def poisson_uniform_200() -> None:
    """200 requests, Poisson 2 req/s, total length uniform 256..2048 (ratio 10:1)."""
    cfg = SyntheticWorkload(
        num_requests=200,
        lengths=UniformLengths(min_tokens=256, max_tokens=2048, prefill_to_decode_ratio=10.0),
        intervals=PoissonIntervals(qps=2.0),
    )
    write_vidur_csv(build_workload(cfg, SEED), OUT / "poisson_uniform_200.csv")


def multiturn_shared_prefix() -> None:
    """Multi-turn chats with a shared 256-token system prompt, sessions and block hashes.

    Turn t of a session sends the system prompt, every earlier user message and answer, and a
    new user message; so turn t+1 shares all full blocks of turn t's prompt+answer, and every
    request shares the 16 system-prompt blocks. Block ids follow the token stream of each
    session: ids 1..16 are the system prompt, later blocks get ids unique to their session.
    """
    rng = np.random.default_rng(SEED)
    system_tokens, n_sessions = 256, 40
    rows = []  # (arrival, prompt, decode, session)
    starts = np.cumsum(rng.exponential(2.0, n_sessions))  # a new chat every ~2 s
    for session, start in enumerate(starts):
        history, now = system_tokens, start
        for _ in range(int(rng.integers(1, 7))):
            user, answer = int(rng.integers(20, 400)), int(rng.integers(10, 300))
            rows.append((now, history + user, answer, session))
            history += user + answer
            now += 5.0 + rng.exponential(20.0)  # response + think time
    rows.sort(key=lambda r: r[0])
    arrival, prompt, decode, session = (np.array(c) for c in zip(*rows, strict=True))

    counts = (prompt + decode) // BLOCK  # one id per full block of prompt+output
    k = np.concatenate([np.arange(c) for c in counts])
    owner = np.repeat(session, counts)
    ids = np.where(k < system_tokens // BLOCK, k + 1, (owner + 1) * 1_000_000 + k)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    table = make_table(
        arrival,
        prompt,
        decode,
        session_id=session,
        hash_offsets=offsets,
        hashes=ids,
        hash_block_size=BLOCK,
        source="multiturn_shared_prefix",
    )
    write_vidur_csv(table, OUT / "multiturn_shared_prefix.csv")


if __name__ == "__main__":
    OUT.mkdir(exist_ok=True)
    poisson_uniform_200()
    multiturn_shared_prefix()
    for path in sorted(OUT.iterdir()):
        print(f"{path.relative_to(OUT.parent)}  {path.stat().st_size:,} bytes")
