"""Trace readers on the public traces (skipped when ../shared is absent) and small temp files."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, SHARED
from vidur_fast.workload import TraceWorkload, build_workload, detect_format, read_trace

TRACES = SHARED / "traces"
MOONCAKE_CONV = TRACES / "mooncake" / "conversation_trace.jsonl.gz"
MOONCAKE_SYNTH = TRACES / "mooncake" / "synthetic_trace.jsonl.gz"
AZURE_CONV = TRACES / "azure" / "AzureLLMInferenceTrace_conv.csv.gz"
AZURE_CODE = TRACES / "azure" / "AzureLLMInferenceTrace_code.csv.gz"
SPLITWISE_CONV = TRACES / "vidur" / "splitwise_conv.csv.gz"
SPLITWISE_CODE = TRACES / "vidur" / "splitwise_code.csv.gz"
ARXIV = TRACES / "vidur" / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv.gz"

needs_shared = pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/traces not present")


# ---- public traces ----


@needs_shared
@pytest.mark.parametrize(
    ("path", "fmt", "rows"),
    [
        (MOONCAKE_CONV, "mooncake", 12_031),
        (MOONCAKE_SYNTH, "mooncake", 3_993),
        (AZURE_CONV, "azure", 19_366),
        (AZURE_CODE, "azure", 8_819),
        (SPLITWISE_CONV, "vidur", 19_366),
        (SPLITWISE_CODE, "vidur", 8_819),
    ],
)
def test_public_trace_row_counts(path, fmt, rows):
    assert detect_format(str(path)) == fmt
    data = read_trace(path)
    assert data.format == fmt
    assert len(data) == rows
    assert data.arrival_s[0] == 0.0
    assert np.all(np.diff(data.arrival_s) >= 0)
    assert np.all(data.prompt_tokens >= 1) and np.all(data.decode_tokens >= 1)


@needs_shared
def test_azure_conv_matches_splitwise_conv():
    azure = read_trace(AZURE_CONV)
    vidur = read_trace(SPLITWISE_CONV)
    np.testing.assert_array_equal(azure.prompt_tokens, vidur.prompt_tokens)
    np.testing.assert_array_equal(azure.decode_tokens, vidur.decode_tokens)
    # vidur's arrived_at is the Azure TIMESTAMP minus the first one (microsecond rounding)
    np.testing.assert_allclose(azure.arrival_s, vidur.arrival_s, atol=1e-6)


@needs_shared
def test_mooncake_conversation_stats_and_hash_lists():
    data = read_trace(MOONCAKE_CONV, need_hashes=True)
    assert data.arrival_s[-1] == pytest.approx(3536.999)
    ids = data.block_ids
    assert ids.block_size == 512 and not ids.covers_output
    assert ids.ids.size == 288_500
    np.testing.assert_array_equal(np.diff(ids.offsets), -(-data.prompt_tokens.astype(int) // 512))


@needs_shared
def test_length_only_file_reads_without_arrivals():
    data = read_trace(ARXIV, need_arrivals=False)
    assert len(data) == 28_257 and data.arrival_s is None


@needs_shared
def test_trace_workload_public_mooncake_with_hashes_is_fast():
    import time

    start = time.perf_counter()
    table = build_workload(TraceWorkload(str(MOONCAKE_CONV)), seed=0, need_hashes=True)
    elapsed = time.perf_counter() - start
    assert len(table) == 12_031 and table.hash_block_size == 16
    np.testing.assert_array_equal(table.num_hashes, table.prompt_tokens // 16)
    assert elapsed < 5.0  # ~0.3 s here; generous for loaded CI machines


# ---- small files: formats, gzip, detection ----


def _write(path: Path, text: str) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


VIDUR_TEXT = (
    "arrived_at,num_prefill_tokens,num_decode_tokens,session_id,block_hash_ids,block_size\n"
    '0.0,40,8,7,"[11, 12]",16\n'
    '0.5,20,20,,"[11, 13]",16\n'
    '1.5,5,3,7,"[]",16\n'
)


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz", "t.txt"])
def test_vidur_csv_plain_gz_and_sniffed(tmp_path, name):
    path = _write(tmp_path / name, VIDUR_TEXT)
    assert detect_format(str(path)) == "vidur"
    data = read_trace(path, need_hashes=True)
    np.testing.assert_array_equal(data.arrival_s, [0.0, 0.5, 1.5])
    np.testing.assert_array_equal(data.session_id, [7, -1, 7])
    np.testing.assert_array_equal(data.block_ids.offsets, [0, 2, 4, 4])
    np.testing.assert_array_equal(data.block_ids.ids, [11, 12, 11, 13])
    assert data.block_ids.block_size == 16 and data.block_ids.covers_output


def test_mooncake_jsonl_blank_lines_keep_line_numbers(tmp_path):
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]},
        {"timestamp": 1500, "input_length": 10, "output_length": 1, "hash_ids": [1]},
    ]
    text = json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n"
    path = _write(tmp_path / "m.jsonl", text)
    data = read_trace(path, need_hashes=True)
    np.testing.assert_array_equal(data.arrival_s, [0.0, 1.5])
    np.testing.assert_array_equal(data.row_index, [0, 2])


def test_azure_csv_relative_seconds(tmp_path):
    text = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.5000000,10,2\n"
        "2023-11-16 18:15:47.7500000,20,3\n"
        "2023-11-16 18:16:46,30,4\n"
    )
    path = _write(tmp_path / "a.csv", text)
    assert detect_format(str(path)) == "azure"
    data = read_trace(path)
    np.testing.assert_allclose(data.arrival_s, [0.0, 1.25, 59.5])


def test_max_rows_reads_only_the_head(tmp_path):
    path = _write(tmp_path / "t.csv", VIDUR_TEXT)
    assert len(read_trace(path, max_rows=2)) == 2


# ---- project example traces (traces/examples, made by traces/make_examples.py) ----

EXAMPLES = REPO / "traces"


def test_example_traces_are_reproducible(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "OUT", tmp_path)
    module.poisson_uniform_200()
    module.multiturn_shared_prefix()
    for name in ("poisson_uniform_200.csv", "multiturn_shared_prefix.csv"):
        assert (tmp_path / name).read_bytes() == (EXAMPLES / "examples" / name).read_bytes()


def test_multiturn_example_shares_prefixes():
    path = EXAMPLES / "examples" / "multiturn_shared_prefix.csv"
    table = build_workload(TraceWorkload(str(path)), 0, need_hashes=True)
    assert table.has_sessions and table.hash_block_size == 16
    first_blocks = table.hashes[table.hash_offsets[:-1]]
    assert np.unique(first_blocks).size == 1  # the shared system prompt
    # a later turn of a session contains every full block of its previous turn
    multi = [s for s in np.unique(table.session_id) if np.sum(table.session_id == s) > 1]
    assert multi
    for s in multi:
        turns = np.flatnonzero(table.session_id == s)
        a, b = table.hashes_of(turns[0]), table.hashes_of(turns[1])
        np.testing.assert_array_equal(b[: a.size], a)
