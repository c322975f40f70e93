"""Prefix-block hash mapping: prefix property, block-size regrouping, determinism."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SHARED
from vidur_fast.errors import TraceError
from vidur_fast.workload import TraceWorkload, build_workload
from vidur_fast.workload.hashes import derive_block_hashes, fit_block_hashes

TRACES = SHARED / "traces"
MOONCAKE_CONV = TRACES / "mooncake" / "conversation_trace.jsonl.gz"


def _mooncake(tmp_path: Path, rows: list[tuple[int, int, list[int]]]) -> str:
    path = tmp_path / "m.jsonl"
    lines = [
        json.dumps({"timestamp": t * 1000, "input_length": p, "output_length": 5, "hash_ids": h})
        for t, (p, h) in enumerate((p, h) for _, p, h in rows)
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _trace_hashes(path: str, block_size: int = 16, **kw):
    table = build_workload(TraceWorkload(path, **kw), 0, block_size=block_size, need_hashes=True)
    return table, [table.hashes_of(i) for i in range(len(table))]


def _shared_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def test_mooncake_prefix_property_at_block_16(tmp_path):
    path = _mooncake(
        tmp_path,
        [
            (0, 2048, [1, 2, 3, 4]),
            (1, 2048, [1, 2, 9, 10]),  # shares the first 2 ids (1024 tokens)
            (2, 2048, [1, 2, 3, 4]),  # identical to request 0
            (3, 2048, [5, 2, 3, 4]),  # differs at id 0
        ],
    )
    table, h = _trace_hashes(path)
    assert table.hash_block_size == 16
    assert all(x.size == 2048 // 16 for x in h)
    assert _shared_prefix(h[0], h[1]) == 64  # exactly the first 64 engine blocks
    assert not np.intersect1d(h[0][64:], h[1][64:]).size
    np.testing.assert_array_equal(h[0], h[2])
    assert _shared_prefix(h[0], h[3]) == 0
    # blocks inside one 512-token block still get distinct hashes
    assert np.unique(h[0]).size == h[0].size
    assert np.all(table.hashes > 0)


def test_mooncake_partial_last_block_and_prompt_only(tmp_path):
    # 700 tokens: ids cover 512 + 188 (partial); 43 full engine blocks
    path = _mooncake(tmp_path, [(0, 700, [1, 2]), (1, 700, [1, 3])])
    _, h = _trace_hashes(path)
    assert h[0].size == 700 // 16 == 43
    assert _shared_prefix(h[0], h[1]) == 32


@pytest.mark.parametrize("block_size", [16, 32, 64, 256, 512, 1024])
def test_mooncake_prefix_property_other_block_sizes(tmp_path, block_size):
    path = _mooncake(tmp_path, [(0, 4096, [1, 2, 3, 4, 5, 6, 7, 8]), (1, 4096, [1, 2, 3, 0] * 2)])
    _, h = _trace_hashes(path, block_size)
    assert h[0].size == 4096 // block_size
    # requests agree on tokens [0, 1536): blocks fully inside are shared
    assert _shared_prefix(h[0], h[1]) == 1536 // block_size


def test_incompatible_block_size_is_a_trace_error(tmp_path):
    path = _mooncake(tmp_path, [(0, 1024, [1, 2])])
    with pytest.raises(TraceError, match="block_size mismatch"):
        _trace_hashes(path, block_size=48)


def _vidur(tmp_path: Path, rows: list[tuple[int, int, list[int]]], block: int) -> str:
    path = tmp_path / "v.csv"
    lines = ["arrived_at,num_prefill_tokens,num_decode_tokens,block_hash_ids,block_size"]
    lines += [f'{i},{p},{d},"{json.dumps(h)}",{block}' for i, (p, d, h) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_vidur_equal_block_size_keeps_equality_structure(tmp_path):
    path = _vidur(tmp_path, [(40, 10, [7, 8, 9]), (40, 10, [7, 8, 5]), (33, 1, [6, 8])], 16)
    _, h = _trace_hashes(path, 16)
    assert [x.size for x in h] == [3, 3, 2]  # output blocks kept (3 = (40+10)//16)
    assert _shared_prefix(h[0], h[1]) == 2
    assert h[0][1] != h[2][1]  # same id 8 at block 1, but a different prefix


def test_vidur_coarser_engine_blocks_chain_groups(tmp_path):
    ids_a = list(range(1, 9))
    ids_b = [1, 2, 3, 4, 5, 99, 7, 8]
    path = _vidur(tmp_path, [(128, 1, ids_a), (128, 1, ids_b)], 16)
    _, h = _trace_hashes(path, 32)
    assert [x.size for x in h] == [4, 4]
    assert _shared_prefix(h[0], h[1]) == 2  # group 3 holds trace block 5


def test_vidur_finer_engine_blocks_derive_children(tmp_path):
    path = _vidur(tmp_path, [(128, 1, [1, 2, 3, 4]), (128, 1, [1, 2, 0, 4])], 32)
    _, h = _trace_hashes(path, 16)
    assert [x.size for x in h] == [8, 8]
    assert _shared_prefix(h[0], h[1]) == 4
    assert np.unique(h[0]).size == 8


def test_scaling_pads_with_private_hashes_and_truncates(tmp_path):
    path = _mooncake(tmp_path, [(0, 1024, [1, 2]), (1, 1024, [1, 2])])
    _, same = _trace_hashes(path)
    _, up = _trace_hashes(path, prefill_scale=2.0)
    _, down = _trace_hashes(path, prefill_scale=0.5)
    np.testing.assert_array_equal(up[0][:64], same[0])
    assert up[0].size == 128 and _shared_prefix(up[0], up[1]) == 64  # padding is private
    np.testing.assert_array_equal(down[0], same[0][:32])


def test_fit_block_hashes_unchanged_returns_input():
    offsets, hashes = np.array([0, 2, 3]), np.array([5, 6, 7])
    out_off, out = fit_block_hashes(
        offsets, hashes, np.array([2, 1]), np.array([2, 1]), np.arange(2)
    )
    assert out is hashes and out_off is offsets


def test_derive_block_hashes_never_zero_and_stable():
    offsets = np.array([0, 3, 5])
    ids = np.array([0, 0, 0, -1, 2**62])
    off, h = derive_block_hashes(offsets, ids, 4, 2, np.array([6, 4]))
    np.testing.assert_array_equal(off, [0, 6, 10])
    assert h.dtype == np.int64 and np.all(h >= 1)
    assert np.unique(h).size == 10
    _, again = derive_block_hashes(offsets, ids, 4, 2, np.array([6, 4]))
    np.testing.assert_array_equal(h, again)


def test_hash_values_identical_across_processes(tmp_path):
    path = _mooncake(tmp_path, [(0, 1100, [3, 1, 4]), (1, 600, [3, 5])])
    code = (
        "from vidur_fast.workload import TraceWorkload, build_workload;"
        f"t = build_workload(TraceWorkload({path!r}), 0, need_hashes=True);"
        "print(','.join(map(str, t.hashes)))"
    )
    run = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    _, h = _trace_hashes(path)
    here = ",".join(map(str, np.concatenate(h)))
    assert run[0].stdout.strip() == run[1].stdout.strip() == here


@pytest.mark.skipif(not MOONCAKE_CONV.is_file(), reason="../shared/traces not present")
def test_public_mooncake_prefix_property():
    import gzip

    with gzip.open(MOONCAKE_CONV, "rt") as f:
        ids = [json.loads(line)["hash_ids"] for line in f]
    table = build_workload(TraceWorkload(str(MOONCAKE_CONV)), 0, need_hashes=True)
    # pick pairs sharing exactly the first 2 Mooncake ids, both with >= 3 full 512 blocks
    first = {}
    pairs = []
    for i, x in enumerate(ids):
        if len(x) >= 4 and table.prompt_tokens[i] >= 1536:
            for j in first.get(tuple(x[:2]), []):
                if ids[j][2] != x[2]:
                    pairs.append((j, i))
            first.setdefault(tuple(x[:2]), []).append(i)
        if len(pairs) >= 20:
            break
    assert pairs
    for a, b in pairs:
        assert _shared_prefix(table.hashes_of(a), table.hashes_of(b)) == 64
