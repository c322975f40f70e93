"""A Vidur CSV of plain numbers is read by numpy and a Mooncake JSONL whose records all carry
their fields as numbers without building a DataFrame (no pandas), with the values and errors
the pandas reader gives; anything else still goes through pandas."""

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO, SHARED
from vidur_fast.errors import TraceError
from vidur_fast.workload import readers
from vidur_fast.workload.readers import read_trace

EXAMPLE = REPO / "traces" / "examples" / "poisson_uniform_200.csv"
SPLITWISE_CONV = SHARED / "traces" / "vidur" / "splitwise_conv.csv.gz"
MOONCAKE_CONV = SHARED / "traces" / "mooncake" / "conversation_trace.jsonl.gz"


def _via_pandas(monkeypatch, *args, **kw):
    with monkeypatch.context() as m:
        m.setattr(readers, "_plain_csv", lambda path, max_rows: None)
        return read_trace(*args, **kw)


def _same(a, b):
    for name in ("prompt_tokens", "decode_tokens", "arrival_s", "row_index", "session_id"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype, name
            assert np.array_equal(x, y), name  # bit for bit: both read the nearest double
    assert (a.block_ids is None) == (b.block_ids is None)
    if a.block_ids is not None:
        assert np.array_equal(a.block_ids.offsets, b.block_ids.offsets)
        assert np.array_equal(a.block_ids.ids, b.block_ids.ids)
        assert a.block_ids.block_size == b.block_ids.block_size


def _mooncake_via_pandas(monkeypatch, *args, **kw):
    with monkeypatch.context() as m:
        m.setattr(readers, "_record_numbers", lambda records, key: None)
        return read_trace(*args, **kw)


@pytest.mark.parametrize("max_rows", [None, 7])
@pytest.mark.parametrize("need_arrivals", [True, False])
def test_plain_file_reads_as_pandas_does(monkeypatch, max_rows, need_arrivals):
    assert readers._plain_csv(str(EXAMPLE), max_rows) is not None  # the numpy path is taken
    fast = read_trace(EXAMPLE, need_arrivals=need_arrivals, max_rows=max_rows)
    _same(fast, _via_pandas(monkeypatch, EXAMPLE, need_arrivals=need_arrivals, max_rows=max_rows))


@pytest.mark.skipif(not SPLITWISE_CONV.is_file(), reason="../shared/traces not present")
def test_gzip_trace_reads_as_pandas_does(monkeypatch):
    fast = read_trace(SPLITWISE_CONV, need_arrivals=False)
    _same(fast, _via_pandas(monkeypatch, SPLITWISE_CONV, need_arrivals=False))


def test_random_decimals_read_as_pandas_does(tmp_path, monkeypatch):
    rng = np.random.default_rng(7)
    n = 2000
    digits = rng.integers(1, 18, n)
    arrivals = np.sort(rng.random(n) * 10.0 ** rng.integers(0, 6, n))
    text = [f"{a:.{d}f}" for a, d in zip(arrivals, digits, strict=True)]
    order = np.argsort([float(t) for t in text], kind="stable")
    rows = [f"{text[i]},{rng.integers(1, 9000)},{rng.integers(1, 900)}" for i in order]
    path = tmp_path / "t.csv.gz"
    path.write_bytes(
        gzip.compress(
            ("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "\n".join(rows) + "\n").encode()
        )
    )
    assert readers._plain_csv(str(path), None) is not None
    _same(read_trace(path), _via_pandas(monkeypatch, path))


@pytest.mark.parametrize(
    "body",
    [
        "1.0,5,3\n,4,2\n",  # an empty field
        "1.0,5,3\n2.0,4\n",  # a short row
        "1.0,5,3\n2.0,4,2,9\n",  # a long row
        "1.0,5,3\n-2.0,4,2\n",  # a sign
        "1.0,5,3\n2e1,4,2\n",  # an exponent
        '1.0,5,3\n"2.0",4,2\n',  # quotes
        "1.0,5,3\n\n2.0,4,2\n",  # a blank line
        "1.0,5,3\n2.0,x,2\n",  # text
        "1.0,5,3\n2.0,4,2\r\n",  # CRLF
    ],
)
def test_anything_but_plain_numbers_goes_to_pandas(tmp_path, body):
    path = tmp_path / "t.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + body)
    assert readers._plain_csv(str(path), None) is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("1.0,5,3\n2.0,0,2\n", "row 2, column 'num_prefill_tokens': must be > 0 (got 0)"),
        ("2.0,5,3\n1.0,4,2\n", "arrived_at"),
        ("1.0,5,3\n2.0,4.5,2\n", None),  # a fraction of a token: read, rejected later
    ],
)
def test_plain_file_errors_as_pandas_path(tmp_path, monkeypatch, body, message):
    path = tmp_path / "t.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + body)
    assert readers._plain_csv(str(path), None) is not None
    if message is None:
        _same(read_trace(path), _via_pandas(monkeypatch, path))
        return
    with pytest.raises(TraceError) as fast:
        read_trace(path)
    with pytest.raises(TraceError) as slow:
        _via_pandas(monkeypatch, path)
    assert str(fast.value) == str(slow.value)
    assert message in str(fast.value)


def test_a_plain_trace_run_imports_no_pandas(tmp_path):
    code = (
        "import sys\n"
        "from vidur_fast.api import simulate\n"
        "from vidur_fast.config.sim import OutputConfig, SimConfig\n"
        "from vidur_fast.config.workload import TraceWorkload\n"
        "from vidur_fast.outputs.writer import write_run\n"
        f"cfg = SimConfig(workload=TraceWorkload(path={str(EXAMPLE)!r}),\n"
        f"                output=OutputConfig(dir={str(tmp_path / 'run')!r}), quiet=True)\n"
        "write_run(simulate(cfg), cfg.output)\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
    assert (tmp_path / "run" / "request_metrics.csv").is_file()


@pytest.mark.skipif(not MOONCAKE_CONV.is_file(), reason="../shared/traces not present")
@pytest.mark.parametrize("need_hashes", [True, False])
def test_mooncake_trace_reads_as_pandas_does(monkeypatch, need_hashes):
    fast = read_trace(MOONCAKE_CONV, need_hashes=need_hashes, max_rows=3000)
    slow = _mooncake_via_pandas(monkeypatch, MOONCAKE_CONV, need_hashes=need_hashes, max_rows=3000)
    _same(fast, slow)


def _jsonl(tmp_path, records) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return str(path)


REC = {"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [1, 2]}


@pytest.mark.parametrize(
    "bad",
    [
        {"input_length": 0},  # out of range
        {"input_length": 600.5},  # a fraction (read; rounded down later)
        {"timestamp": -1},  # out of range
        {"output_length": "7"},  # text: the pandas reader names it
        {"output_length": True},  # a boolean
        {"output_length": None},  # null
        {"hash_ids": 3},  # not a list
        {"hash_ids": [1, "x"]},  # not integers
        {"timestamp": 2**60},  # beyond 2**53; also out of order
    ],
)
def test_mooncake_values_and_errors_as_pandas_path(tmp_path, monkeypatch, bad):
    assert readers._record_numbers([REC, REC], "input_length") is not None  # the fast path
    path = _jsonl(tmp_path, [REC, {**REC, "timestamp": 5, **bad}])
    for need_hashes in (True, False):
        try:
            fast = read_trace(path, need_hashes=need_hashes)
        except TraceError as exc:
            with pytest.raises(TraceError) as slow:
                _mooncake_via_pandas(monkeypatch, path, need_hashes=need_hashes)
            assert str(exc) == str(slow.value)
        else:
            _same(fast, _mooncake_via_pandas(monkeypatch, path, need_hashes=need_hashes))


def test_mooncake_missing_fields_as_pandas_path(tmp_path, monkeypatch):
    no_hashes = {k: v for k, v in REC.items() if k != "hash_ids"}
    no_length = {k: v for k, v in REC.items() if k != "output_length"}
    for records in ([REC, no_hashes], [no_length, no_length], [REC, no_length]):
        path = _jsonl(tmp_path, records)
        try:
            fast = read_trace(path, need_hashes=True)
        except TraceError as exc:
            with pytest.raises(TraceError) as slow:
                _mooncake_via_pandas(monkeypatch, path, need_hashes=True)
            assert str(exc) == str(slow.value)
        else:
            _same(fast, _mooncake_via_pandas(monkeypatch, path, need_hashes=True))
