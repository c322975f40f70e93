"""Bad prefix-caching / routing input through the CLI: one line on stderr, exit 2, no output."""

import subprocess
import sys

import pytest

from tests.helpers.cli_args import FAST_TIMING_ARGS

FAST = [*FAST_TIMING_ARGS, "--quiet"]
HEAD = "arrived_at,num_prefill_tokens,num_decode_tokens,block_hash_ids,block_size\n"

CASES = {
    "hash ids not ints": (HEAD + '0,32,4,"[1, ""a""]",16\n', [], "block_hash_ids"),
    "too few hashes": (HEAD + '0,64,4,"[1, 2]",16\n', [], "block_hash_ids"),
    "block size mismatch": (
        HEAD + '0,32,4,"[1, 2]",16\n',
        ["scheduler:vllm-v1", "--scheduler.block-size", "24"],
        "block_size mismatch",
    ),
    "sticky without sessions": (
        HEAD + '0,32,4,"[1, 2]",16\n',
        ["router:sticky"],
        "sticky needs session ids",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_prefix_input_is_one_line_exit_2(tmp_path, case):
    text, extra, needle = CASES[case]
    trace = tmp_path / "t.csv"
    trace.write_text(text)
    out = tmp_path / "run"
    args = ["--output.dir", str(out), *FAST, "workload:trace", "--workload.path", str(trace)]
    res = subprocess.run(
        [sys.executable, "-m", "vidur_fast.commands.main", *args, *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 2, res.stderr
    lines = [x for x in res.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert needle in lines[0]
    assert not out.exists()
