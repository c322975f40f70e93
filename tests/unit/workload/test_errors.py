"""Bad-input matrix: every case raises one-line TraceError/ConfigError naming row/column/field."""

import json

import pytest

from vidur_fast.errors import ConfigError, TraceError
from vidur_fast.workload import (
    FixedLengths,
    GammaIntervals,
    PoissonIntervals,
    StaticIntervals,
    SyntheticWorkload,
    TraceLengths,
    TraceWorkload,
    UniformLengths,
    ZipfLengths,
    build_workload,
)

V = "arrived_at,num_prefill_tokens,num_decode_tokens"
VH = V + ",block_hash_ids,block_size"

# (file name, contents, extra TraceWorkload kwargs, need_hashes, expected message regex)
TRACE_CASES = {
    "missing column": (
        "t.csv",
        "arrived_at,num_prefill_tokens\n0,5\n",
        {},
        False,
        r"missing column\(s\) num_decode_tokens",
    ),
    "non-numeric": (
        "t.csv",
        f"{V}\n0,5,5\n1,abc,5\n",
        {},
        False,
        r"row 2, column 'num_prefill_tokens': not a number \(got 'abc'\)",
    ),
    "empty cell": (
        "t.csv",
        f"{V}\n0,,5\n",
        {},
        False,
        r"row 1, column 'num_prefill_tokens': missing value",
    ),
    "nan": (
        "t.csv",
        f"{V}\n0,5,5\n1,5,nan\n",
        {},
        False,
        r"row 2, column 'num_decode_tokens': missing value",
    ),
    "inf": (
        "t.csv",
        f"{V}\n0,inf,5\n",
        {},
        False,
        r"row 1, column 'num_prefill_tokens': must be finite",
    ),
    "negative": (
        "t.csv",
        f"{V}\n0,-5,5\n",
        {},
        False,
        r"row 1, column 'num_prefill_tokens': must be > 0 \(got -5\)",
    ),
    "zero decode": (
        "t.csv",
        f"{V}\n0,5,1\n1,5,0\n",
        {},
        False,
        r"row 2, column 'num_decode_tokens': must be > 0 \(got 0\)",
    ),
    "negative arrival": (
        "t.csv",
        f"{V}\n-1,5,5\n",
        {},
        False,
        r"row 1, column 'arrived_at': must be >= 0",
    ),
    "unsorted": (
        "t.csv",
        f"{V}\n0,5,5\n5,5,5\n3,5,5\n",
        {},
        False,
        r"row 3, column 'arrived_at': arrival 3 is earlier .* sorted",
    ),
    "empty file": ("t.csv", "", {}, False, r"empty file"),
    "header only": ("t.csv", f"{V}\n", {}, False, r"no data rows"),
    "not a csv": ("t.csv", f'{V}\n0,5,5\n1,5,"5\n', {}, False, r"not a readable CSV"),
    "short row": (
        "t.csv",
        f"{V}\n0,5,5\n1,5\n",
        {},
        False,
        r"row 2, column 'num_decode_tokens': missing value",
    ),
    "session fraction": (
        "t.csv",
        f"{V},session_id\n0,5,5,1.5\n",
        {},
        False,
        r"row 1, column 'session_id': must be a whole number",
    ),
    "too many rows asked": (
        "t.csv",
        f"{V}\n0,5,5\n1,5,5\n",
        {"num_requests": 5},
        False,
        r"workload.num_requests is 5 but the file has only 2 data rows",
    ),
    "bad hash json": (
        "t.csv",
        f'{VH}\n0,32,1,"[1, 2]",16\n1,32,1,"[1, 2",16\n',
        {},
        True,
        r"row 2, column 'block_hash_ids': malformed JSON",
    ),
    "hash not list": (
        "t.csv",
        f'{VH}\n0,32,1,"{{""a"": 1}}",16\n',
        {},
        True,
        r"row 1, column 'block_hash_ids': must be a list of integers",
    ),
    "hash float": (
        "t.csv",
        f'{VH}\n0,32,1,"[1, 2]",16\n1,32,1,"[1, 2.5]",16\n',
        {},
        True,
        r"row 2, column 'block_hash_ids': must be a list of 64-bit integers "
        r"\(element 1 is 2.5\)",
    ),
    "hash bare numbers": (
        "t.csv",
        f'{VH}\n0,32,1,"1, 2",16\n',
        {},
        True,
        r"row 1, column 'block_hash_ids': malformed JSON \(got '1, 2'\)",
    ),
    "hash missing": (
        "t.csv",
        f"{VH}\n0,32,1,,16\n",
        {},
        True,
        r"row 1, column 'block_hash_ids': missing value",
    ),
    "hash too short": (
        "t.csv",
        f'{VH}\n0,64,1,"[1, 2]",16\n',
        {},
        True,
        r"row 1, column 'block_hash_ids': 2 ids but .* needs 4",
    ),
    "hash too long": (
        "t.csv",
        f'{VH}\n0,32,1,"[1, 2, 3]",16\n',
        {},
        True,
        r"row 1, column 'block_hash_ids': 3 ids but .* at most 2",
    ),
    "block size varies": (
        "t.csv",
        f'{VH}\n0,32,1,"[1, 2]",16\n1,32,1,"[1]",32\n',
        {},
        True,
        r"row 2, column 'block_size': block_size mismatch",
    ),
    "block size column missing": (
        "t.csv",
        f'{V},block_hash_ids\n0,32,1,"[1, 2]"\n',
        {},
        True,
        r"missing column block_size",
    ),
    "bad jsonl line": (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
        '{"timestamp": 1, "input_length": 5,\n',
        {},
        False,
        r"row 2, column '-': malformed JSON",
    ),
    "jsonl missing field": (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
        '{"timestamp": 1, "input_length": 5}\n',
        {},
        False,
        r"row 2, column 'output_length': missing value",
    ),
    "jsonl string length": (
        "m.jsonl",
        '{"timestamp": 0, "input_length": "x", "output_length": 1}\n',
        {},
        False,
        r"row 1, column 'input_length': not a number",
    ),
    "jsonl hash_ids short": (
        "m.jsonl",
        json.dumps({"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2]})
        + "\n",
        {},
        True,
        r"row 1, column 'hash_ids': 2 ids but .* needs 3",
    ),
    "jsonl hash_ids not list": (
        "m.jsonl",
        json.dumps({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": 7}) + "\n",
        {},
        True,
        r"row 1, column 'hash_ids': must be a list of integers",
    ),
    "jsonl not object": ("m.jsonl", "[1, 2]\n", {}, False, r"row 1.*JSON object"),
    "azure bad time": (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,5\nyesterday,5,5\n",
        {},
        False,
        r"row 2, column 'TIMESTAMP': not a datetime",
    ),
    "azure unsorted": (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.68,5,5\n2023-11-16 18:15:45,5,5\n",
        {},
        False,
        r"row 2, column 'TIMESTAMP'.* sorted",
    ),
    "azure missing column": (
        "a.csv",
        "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,5\n",
        {},
        False,
        r"missing column\(s\) GeneratedTokens",
    ),
    "forced wrong format": (
        "t.csv",
        f"{V}\n0,5,5\n",
        {"format": "azure"},
        False,
        r"missing column\(s\) TIMESTAMP, ContextTokens, GeneratedTokens",
    ),
    "incompatible blocks": (
        "t.csv",
        f'{VH}\n0,48,1,"[1, 2, 3]",16\n',
        {},
        True,
        r"block_size mismatch: trace blocks of 16 .* engine blocks of 24",
    ),
}


@pytest.mark.parametrize("case", TRACE_CASES)
def test_bad_trace_inputs(tmp_path, case):
    name, text, extra, need_hashes, pattern = TRACE_CASES[case]
    path = tmp_path / name
    path.write_text(text)
    block_size = 24 if case == "incompatible blocks" else 16
    with pytest.raises(TraceError, match=pattern) as info:
        build_workload(
            TraceWorkload(str(path), **extra), 0, block_size=block_size, need_hashes=need_hashes
        )
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="file not found"):
        build_workload(TraceWorkload(str(tmp_path / "nope.csv")), 0)


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "t.csv.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(TraceError, match=str(path)):
        build_workload(TraceWorkload(str(path)), 0)


CONFIG_CASES = {
    "qps zero": (
        SyntheticWorkload(intervals=PoissonIntervals(qps=0)),
        r"^workload.intervals.qps: must be > 0 \(got 0\)$",
    ),
    "gamma cv": (
        SyntheticWorkload(intervals=GammaIntervals(cv=-1.0)),
        r"^workload.intervals.cv: must be > 0",
    ),
    "num_requests zero": (
        SyntheticWorkload(num_requests=0),
        r"^workload.num_requests: must be an integer >= 1 \(got 0\)",
    ),
    "unbounded": (
        SyntheticWorkload(num_requests=None),
        r"^workload.num_requests: set num_requests or duration_s",
    ),
    "static with duration": (
        SyntheticWorkload(num_requests=None, duration_s=5.0, intervals=StaticIntervals()),
        r"^workload.num_requests: static intervals need num_requests",
    ),
    "duration negative": (SyntheticWorkload(duration_s=-1.0), r"^workload.duration_s: must be > 0"),
    "nothing arrives": (
        SyntheticWorkload(num_requests=None, duration_s=1e-9),
        r"^workload.duration_s: no request arrives",
    ),
    "fixed decode": (
        SyntheticWorkload(lengths=FixedLengths(decode_tokens=0)),
        r"^workload.lengths.decode_tokens: must be an integer >= 1",
    ),
    "uniform range": (
        SyntheticWorkload(lengths=UniformLengths(min_tokens=10, max_tokens=5)),
        r"^workload.lengths.max_tokens: must be an integer >= 10 \(got 5\)",
    ),
    "uniform ratio": (
        SyntheticWorkload(lengths=UniformLengths(prefill_to_decode_ratio=-1)),
        r"^workload.lengths.prefill_to_decode_ratio: must be finite and >= 0",
    ),
    "zipf theta": (
        SyntheticWorkload(lengths=ZipfLengths(theta=1.0)),
        r"^workload.lengths.theta: must be in \(0, 1\)",
    ),
    "trace lengths scale": (
        SyntheticWorkload(lengths=TraceLengths("x.csv", prefill_scale=0)),
        r"^workload.lengths.prefill_scale: must be > 0",
    ),
    "max_tokens": (SyntheticWorkload(max_tokens=1), r"^workload.max_tokens: must be an integer"),
    "trace scale": (TraceWorkload("x.csv", time_scale=0.0), r"^workload.time_scale: must be > 0"),
    "trace num": (TraceWorkload("x.csv", num_requests=-3), r"^workload.num_requests: must be"),
    "trace clip": (TraceWorkload("x.csv", clip="middle"), r"^workload.clip: must be one of"),
    "trace format": (TraceWorkload("x.csv", format="csv"), r"^workload.format: must be one of"),
}


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_bad_configs(case):
    cfg, pattern = CONFIG_CASES[case]
    with pytest.raises(ConfigError, match=pattern) as info:
        build_workload(cfg, 0)
    assert "\n" not in str(info.value)


def test_bad_seed_and_block_size():
    with pytest.raises(ConfigError, match=r"^seed: must be an integer >= 0"):
        build_workload(SyntheticWorkload(), -1)
    with pytest.raises(ConfigError, match=r"^block_size: must be an integer >= 1"):
        build_workload(SyntheticWorkload(), 0, block_size=0)


def test_field_path_prefix_is_configurable():
    with pytest.raises(ConfigError, match=r"^sweep\[2\].workload.intervals.qps"):
        build_workload(
            SyntheticWorkload(intervals=PoissonIntervals(qps=-1)), 0, where="sweep[2].workload"
        )
