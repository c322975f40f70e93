"""Vidur's config explorer: job expansion and validity, job keys, the QPS search, and an end to
end run through `vidur-fast vidur-compat explore` that resumes from its probe directories."""

import hashlib

import pandas as pd
import pytest

from vidur_fast.commands.main import main
from vidur_fast.explore.vidur_explorer import SearchSettings, load_jobs, search_qps

YAML = """
clusters:
  - {device: h100, num_gpus: 4, gpus_per_node: 2}
schedulers:
  - {scheduler: vllm}
  - {scheduler: sarathi, chunk_size: 512}
traces:
  - {name: small, trace_file: "./t.csv", max_seq_len: 4096, num_requests: 60, start_qps: 4}
batch_sizes: [16]
tp_dimensions: [1, 2, 4]
pp_dimensions: [1, 2]
models:
  - {name: llama-3-8b, identifier: meta-llama/Meta-Llama-3-8B, exclude_tp_dims: [2]}
"""


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    lines = ["num_prefill_tokens,num_decode_tokens"]
    lines += [f"{300 + 37 * (i % 50)},{20 + 7 * (i % 13)}" for i in range(100)]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "ex.yml").write_text(YAML)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_jobs_follow_vidurs_expansion_and_validity(workdir):
    jobs = load_jobs("ex.yml")
    # tp 2 excluded for the model, tp 4 wider than a node: tp 1 x pp {1, 2} x 2 schedulers
    assert [(j.scheduler["scheduler"], j.tp, j.pp) for j in jobs] == [
        ("vllm", 1, 1),
        ("vllm", 1, 2),
        ("sarathi", 1, 1),
        ("sarathi", 1, 2),
    ]
    j = jobs[3]
    assert (j.num_replicas, j.batch_cap) == (2, 32)
    key = "llama-3-8b_small_tk4096_rq60_h100_sarathi_cs512_tp1_pp2_bsz32"
    assert j.key() == key
    assert j.hash() == hashlib.sha1(key.encode()).hexdigest()[:8]


@pytest.mark.parametrize("capacity", [0.7, 10.0, 55.0])
def test_the_search_brackets_the_capacity(capacity):
    """With a delay that jumps over the SLO above the capacity, the search ends within the
    granularity below it, starting from the middle of [0, 2 x start_qps]."""
    seen = []

    def probe(qps):
        seen.append(qps)
        return 0.1 if qps <= capacity else 50.0

    best, probes = search_qps(probe, 3.0, SearchSettings(max_iterations=60))
    assert seen[0] == 3.0 and probes == len(seen)
    assert capacity * (1 - 0.05) <= best <= capacity


def test_a_failed_probe_ends_the_search():
    best, probes = search_qps(lambda qps: None, 3.0, SearchSettings())
    assert (best, probes) == (None, 1)


def test_explore_runs_end_to_end_and_resumes(workdir, capsys):
    argv = [
        "vidur-compat",
        "explore",
        "--config-path",
        "ex.yml",
        "--output-dir",
        "out",
        "--num-threads",
        "1",
        "--max-iterations",
        "5",
        "--executor",
        "local",
    ]
    assert main(argv) == 0
    df = pd.read_csv(workdir / "out" / "results.csv")
    assert len(df) == 4 and df["max_qps_under_sla"].notna().all()
    assert {"qps_per_dollar", "pareto_ttft_p90", "cost_per_hour_usd"} <= set(df.columns)
    probes = sorted((workdir / "out" / "runs").glob("*/*/summary.json"))
    assert probes and (probes[0].parent / "plots" / "request_scheduling_delay.csv").is_file()
    stamps = [p.stat().st_mtime_ns for p in probes]
    assert main(argv) == 0
    assert [p.stat().st_mtime_ns for p in probes] == stamps  # read back, not run again
    assert pd.read_csv(workdir / "out" / "results.csv").equals(df)


@pytest.mark.parametrize(
    "yaml,needle",
    [
        (
            YAML.replace(
                "clusters:\n  - {device: h100, num_gpus: 4, gpus_per_node: 2}", "clusters: []"
            ),
            "clusters",
        ),
        (YAML.replace("scheduler: vllm}", "scheduler: orca}"), "schedulers[0].scheduler"),
        (YAML.replace("tp_dimensions: [1, 2, 4]", "tp_dimensions: [0]"), "tp_dimensions[0]"),
        (YAML + "extra: 1\n", "extra"),
        (YAML.replace("num_gpus: 4", "num_gpus: 1").replace("[1, 2, 4]", "[4]"), "no valid job"),
    ],
)
def test_bad_explorer_files_are_one_line(workdir, capsys, yaml, needle):
    (workdir / "bad.yml").write_text(yaml)
    with pytest.raises(SystemExit) as exc:
        main(["vidur-compat", "explore", "--config-path", "bad.yml", "--output-dir", "o"])
    assert exc.value.code == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], err
