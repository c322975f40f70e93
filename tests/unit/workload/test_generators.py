"""Synthetic generators: statistics, ranges, stopping rules, determinism."""

import subprocess
import sys

import numpy as np
import pytest

from vidur_fast.workload import (
    FixedLengths,
    GammaIntervals,
    PoissonIntervals,
    StaticIntervals,
    SyntheticWorkload,
    TraceIntervals,
    TraceLengths,
    UniformIntervals,
    UniformLengths,
    ZipfLengths,
    build_workload,
)
from vidur_fast.workload.generators import Stream, draw_arrivals, rng_for, zipf_totals


def _build(seed=0, **kw):
    return build_workload(SyntheticWorkload(**kw), seed)


def test_fixed_lengths_exact():
    t = _build(num_requests=50, lengths=FixedLengths(prefill_tokens=300, decode_tokens=7))
    assert len(t) == 50
    assert np.all(t.prompt_tokens == 300) and np.all(t.decode_tokens == 7)
    assert t.hash_block_size == 0 and t.hashes.size == 0
    assert np.all(t.session_id == -1)


def test_poisson_mean_gap_and_untruncated_tail():
    t = _build(num_requests=20_000, intervals=PoissonIntervals(qps=4.0))
    gaps = np.diff(np.concatenate([[0.0], t.arrival_s]))
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)
    assert gaps.std() == pytest.approx(0.25, rel=0.05)  # exponential: std == mean
    assert gaps.max() > 3 / 4.0  # a true exponential exceeds 3/qps about 5% of the time


def test_poisson_truncate_reproduces_vidur_clip():
    t = _build(num_requests=20_000, intervals=PoissonIntervals(qps=4.0, truncate=True))
    gaps = np.diff(np.concatenate([[0.0], t.arrival_s]))
    assert gaps.max() <= 3 / 4.0 + 1e-12
    assert (gaps == 3 / 4.0).mean() == pytest.approx(np.exp(-3), abs=0.01)


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_mean_and_cv(cv):
    t = _build(num_requests=40_000, intervals=GammaIntervals(qps=2.0, cv=cv))
    gaps = np.diff(np.concatenate([[0.0], t.arrival_s]))
    assert gaps.mean() == pytest.approx(0.5, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_static_and_uniform_intervals():
    t = _build(num_requests=10, intervals=StaticIntervals())
    assert np.all(t.arrival_s == 0.0)
    u = _build(num_requests=5, intervals=UniformIntervals(qps=2.0))
    np.testing.assert_allclose(u.arrival_s, [0.5, 1.0, 1.5, 2.0, 2.5])


def test_first_request_arrives_at_its_first_gap():
    rng = rng_for(3, Stream.INTERVALS)
    expected_first = rng.exponential(1.0)
    t = _build(seed=3, num_requests=5)
    assert t.arrival_s[0] == expected_first > 0


def test_duration_rule_drops_late_arrivals():
    t = _build(num_requests=None, duration_s=200.0, intervals=PoissonIntervals(qps=5.0))
    assert t.arrival_s[-1] < 200.0
    assert len(t) == pytest.approx(1000, rel=0.15)
    u = _build(num_requests=None, duration_s=10.0, intervals=UniformIntervals(qps=1.0))
    assert len(u) == 9  # arrivals 1..9 (10 is not < 10)
    both = _build(num_requests=30, duration_s=200.0, intervals=PoissonIntervals(qps=5.0))
    assert len(both) == 30  # whichever limit comes first


def test_duration_then_num_requests_consistent_with_chunking():
    rng = rng_for(0, Stream.INTERVALS)
    few = draw_arrivals(PoissonIntervals(qps=10.0), rng, None, 5.0)
    assert np.all(np.diff(few) >= 0) and few[-1] < 5.0


def test_uniform_lengths_range_and_split():
    cfg = UniformLengths(min_tokens=100, max_tokens=200, prefill_to_decode_ratio=4.0)
    t = _build(num_requests=5000, lengths=cfg)
    total = t.prompt_tokens + t.decode_tokens
    assert total.min() == 100 and total.max() == 200  # inclusive on both ends
    np.testing.assert_array_equal(t.decode_tokens, np.ceil(total / 5.0).astype(int))


def test_uniform_lengths_ratio_zero_keeps_one_prompt_token():
    cfg = UniformLengths(min_tokens=2, max_tokens=10, prefill_to_decode_ratio=0.0)
    t = _build(num_requests=100, lengths=cfg)
    assert np.all(t.prompt_tokens == 1) and np.all(t.decode_tokens >= 1)


def test_zipf_in_range_and_skewed():
    cfg = ZipfLengths(theta=0.9, min_tokens=10, max_tokens=1000)
    totals = zipf_totals(cfg, rng_for(0, Stream.LENGTHS), 50_000, seed=0)
    assert totals.min() >= 10 and totals.max() <= 1000
    counts = np.bincount(totals - 10, minlength=991)
    assert counts[0] > counts[1] > counts[10] > counts[500]
    # YCSB with the fixed zeta(n) = sum_{i=1..n} i^-theta: P(min) = 1/zeta(n)
    zeta = np.sum(np.arange(1, 992) ** -0.9)
    assert counts[0] / totals.size == pytest.approx(1 / zeta, rel=0.05)


def test_zipf_scramble_moves_popular_values_deterministically():
    plain = ZipfLengths(theta=0.9, min_tokens=10, max_tokens=1000)
    mixed = ZipfLengths(theta=0.9, min_tokens=10, max_tokens=1000, scramble=True)
    a = zipf_totals(plain, rng_for(0, Stream.LENGTHS), 20_000, seed=0)
    b = zipf_totals(mixed, rng_for(0, Stream.LENGTHS), 20_000, seed=0)
    assert b.min() >= 10 and b.max() <= 1000
    # same draws, values relabelled by a fixed function: the popular min moves elsewhere
    top = np.bincount(b - 10).argmax() + 10
    assert top != 10
    np.testing.assert_array_equal(b[a == 10], top)
    again = zipf_totals(mixed, rng_for(0, Stream.LENGTHS), 20_000, seed=0)
    np.testing.assert_array_equal(b, again)


def test_zipf_tiny_ranges():
    for lo, hi in [(5, 5), (5, 6), (5, 7)]:
        cfg = ZipfLengths(min_tokens=lo, max_tokens=hi)
        totals = zipf_totals(cfg, rng_for(1, Stream.LENGTHS), 2000, seed=1)
        assert totals.min() >= lo and totals.max() <= hi


def test_trace_lengths_and_intervals_from_files(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n10,100,5\n11,200,6\n13,300,7\n"
    )
    ordered = _build(
        num_requests=7, lengths=TraceLengths(str(path), shuffle=False, prefill_scale=0.5)
    )
    np.testing.assert_array_equal(ordered.prompt_tokens, [50, 100, 150] * 2 + [50])
    shuffled = _build(num_requests=6, lengths=TraceLengths(str(path)))
    assert sorted(shuffled.prompt_tokens[:3]) == [100, 200, 300]
    replay = _build(num_requests=None, intervals=TraceIntervals(str(path), time_scale=2.0))
    np.testing.assert_allclose(replay.arrival_s, [0.0, 2.0, 6.0])


def test_max_tokens_clips_synthetic_proportionally():
    t = _build(num_requests=3, lengths=FixedLengths(3000, 1000), max_tokens=2000)
    assert np.all(t.prompt_tokens == 1500) and np.all(t.decode_tokens == 500)


def test_streams_are_independent():
    a = _build(num_requests=100, lengths=UniformLengths(), intervals=PoissonIntervals(qps=1.0))
    b = _build(num_requests=100, lengths=UniformLengths(), intervals=PoissonIntervals(qps=2.0))
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    np.testing.assert_allclose(a.arrival_s, 2 * b.arrival_s)


def test_determinism_in_process_and_across_processes():
    cfg = dict(num_requests=200, lengths=ZipfLengths(scramble=True), intervals=GammaIntervals())
    one, two = _build(seed=7, **cfg), _build(seed=7, **cfg)
    other = _build(seed=8, **cfg)
    for name in ("arrival_s", "prompt_tokens", "decode_tokens"):
        np.testing.assert_array_equal(getattr(one, name), getattr(two, name))
    assert not np.array_equal(one.arrival_s, other.arrival_s)
    code = (
        "from vidur_fast.workload import *;"
        "t = build_workload(SyntheticWorkload(num_requests=200, lengths=ZipfLengths("
        "scramble=True), intervals=GammaIntervals()), 7);"
        "print(repr(t.arrival_s.tolist()), t.prompt_tokens.tolist())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"{one.arrival_s.tolist()!r} {one.prompt_tokens.tolist()}"
