"""Vidur's config explorer: a YAML of models, traces, clusters, schedulers and parallel sizes
expanded into jobs, and per job a search for the highest QPS whose scheduling-delay quantile
stays under the SLO (`vidur-fast vidur-compat explore`).

Jobs are the product of models x traces x clusters x schedulers x TP x PP x batch sizes, kept
when the cluster has a replica's GPUs, TP is not excluded for the model and TP fits a node; a
replica has TP x PP GPUs, the cluster's GPUs // that many replicas and a batch cap of batch
size x PP. Each simulation is the Vidur command the job stands for at the probed QPS
(synthetic requests with the trace's lengths capped at its max_seq_len, Poisson arrivals), read
by the same flag mapping as `vidur-compat`, and written to OUTPUT/runs/<job hash>/<qps>/ (a
probe whose directory holds a summary is read back instead of run again, so a rerun resumes).
"""

import dataclasses
import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from vidur_fast.catalog import get_device
from vidur_fast.config.files import read_mapping
from vidur_fast.config.sim import OutputConfig
from vidur_fast.errors import ConfigError

SECTIONS = ("clusters", "schedulers", "traces", "batch_sizes", "tp_dimensions", "pp_dimensions")
TOP_KEYS = (*SECTIONS, "models")
# a probe this far over the SLO halves the bracket's upper end instead of moving it to the
# probe (Vidur: 500 s)
HOPELESS_DELAY_S = 500.0


@dataclass(frozen=True)
class SearchSettings:
    """The explorer's search flags (Vidur's names and defaults)."""

    min_search_granularity: float = 2.5
    """Stop when the bracket is narrower than this percentage of the QPS."""
    scheduling_delay_slo_value: float = 5.0
    """SLO on the scheduling delay quantile (s)."""
    scheduling_delay_slo_quantile: float = 0.99
    max_iterations: int = 20
    time_limit_min: float = 30.0
    """Simulated time limit of one probe (minutes)."""


@dataclass(frozen=True)
class Job:
    model: dict
    trace: dict
    cluster: dict
    scheduler: dict
    tp: int
    pp: int
    batch_size: int

    @property
    def num_replicas(self) -> int:
        return self.cluster["num_gpus"] // (self.tp * self.pp)

    @property
    def batch_cap(self) -> int:
        return self.batch_size * self.pp

    def key(self) -> str:
        t = self.trace
        sched = self.scheduler["scheduler"]
        if self.scheduler.get("chunk_size") is not None:
            sched += f"_cs{self.scheduler['chunk_size']}"
        return (
            f"{self.model['name']}_{t['name']}_tk{t['max_seq_len']}_rq{t['num_requests']}_"
            f"{self.cluster['device']}_{sched}_tp{self.tp}_pp{self.pp}_bsz{self.batch_cap}"
        )

    def hash(self) -> str:
        return hashlib.sha1(self.key().encode()).hexdigest()[:8]

    def valid(self) -> bool:
        excluded = self.model.get("exclude_tp_dims") or []
        return (
            self.num_replicas > 0
            and self.tp not in excluded
            and self.tp <= self.cluster["gpus_per_node"]
        )

    def vidur_args(self, qps: float, time_limit_s: float) -> list[str]:
        """The Vidur command line of one probe."""
        t, sched = self.trace, self.scheduler["scheduler"]
        args = {
            "--replica_config_model_name": self.model["identifier"],
            "--replica_config_device": self.cluster["device"],
            "--replica_config_tensor_parallel_size": self.tp,
            "--replica_config_num_pipeline_stages": self.pp,
            "--cluster_config_num_replicas": self.num_replicas,
            "--request_generator_config_type": "synthetic",
            "--synthetic_request_generator_config_num_requests": t["num_requests"],
            "--length_generator_config_type": "trace",
            "--trace_request_length_generator_config_trace_file": t["trace_file"],
            "--trace_request_length_generator_config_max_tokens": t["max_seq_len"],
            "--interval_generator_config_type": "poisson",
            "--poisson_request_interval_generator_config_qps": qps,
            "--replica_scheduler_config_type": sched,
            f"--{sched}_scheduler_config_batch_size_cap": self.batch_cap,
            "--time_limit": time_limit_s,
        }
        if sched == "vllm":
            args["--vllm_scheduler_config_max_tokens_in_batch"] = t["max_seq_len"]
        if sched == "sarathi":
            args["--sarathi_scheduler_config_chunk_size"] = self.scheduler["chunk_size"]
        return [str(x) for kv in args.items() for x in kv]

    def row(self) -> dict[str, Any]:
        """The job's fields as Vidur's result table names them, plus cost."""
        device = get_device(self.cluster["device"])
        gpus = self.num_replicas * self.tp * self.pp
        return {
            "job_hash": self.hash(),
            "model": self.model["name"],
            "replica_config_model_name": self.model["identifier"],
            "trace": self.trace["name"],
            "max_seq_len": self.trace["max_seq_len"],
            "num_requests": self.trace["num_requests"],
            "replica_config_device": self.cluster["device"],
            "replica_scheduler_config_type": self.scheduler["scheduler"],
            "chunk_size": self.scheduler.get("chunk_size"),
            "replica_config_tensor_parallel_size": self.tp,
            "replica_config_num_pipeline_stages": self.pp,
            "batch_size_cap": self.batch_cap,
            "cluster_config_num_replicas": self.num_replicas,
            "num_gpus": gpus,
            "cost_per_hour_usd": gpus * device.price_per_hour_usd,
        }


# ---- the explorer file ----


def _need(section: str, entry: Any, keys: tuple[str, ...], where: str) -> dict:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a mapping with {', '.join(keys)} (got {entry!r})")
    missing = [k for k in keys if k not in entry]
    if missing:
        raise ConfigError(f"{where}.{missing[0]}: required in every {section} entry")
    return entry


def _ints(data: dict, key: str) -> list[int]:
    values = data[key]
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{key}: must be a non-empty list of integers (got {values!r})")
    for k, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{key}[{k}]: must be an integer >= 1 (got {v!r})")
    return values


def load_jobs(path: str) -> list[Job]:
    """Every valid job of an explorer YAML, in Vidur's expansion order."""
    data = read_mapping(path, "--config-path", "keys " + ", ".join(TOP_KEYS))
    for key in data:
        if key not in TOP_KEYS:
            raise ConfigError(
                f"{key}: unknown key of the explorer file; keys: {', '.join(TOP_KEYS)}"
            )
    for key in TOP_KEYS:
        if key not in data:
            raise ConfigError(f"{key}: required in the explorer file")
    lists = {}
    for key, fields in (
        ("models", ("name", "identifier")),
        ("traces", ("name", "trace_file", "max_seq_len", "num_requests", "start_qps")),
        ("clusters", ("device", "num_gpus", "gpus_per_node")),
        ("schedulers", ("scheduler",)),
    ):
        if not isinstance(data[key], list) or not data[key]:
            raise ConfigError(f"{key}: must be a non-empty list (got {data[key]!r})")
        lists[key] = [_need(key, e, fields, f"{key}[{k}]") for k, e in enumerate(data[key])]
    for k, s in enumerate(lists["schedulers"]):
        if s["scheduler"] not in ("vllm", "sarathi"):
            raise ConfigError(
                f"schedulers[{k}].scheduler: one of vllm, sarathi (got {s['scheduler']!r})"
            )
        if s["scheduler"] == "sarathi" and not s.get("chunk_size"):
            raise ConfigError(f"schedulers[{k}].chunk_size: required for sarathi")
    for k, c in enumerate(lists["clusters"]):
        get_device(c["device"])
        for f in ("num_gpus", "gpus_per_node"):
            if isinstance(c[f], bool) or not isinstance(c[f], int) or c[f] < 1:
                raise ConfigError(f"clusters[{k}].{f}: must be an integer >= 1 (got {c[f]!r})")
    for k, t in enumerate(lists["traces"]):
        if not (isinstance(t["start_qps"], int | float) and t["start_qps"] > 0):
            raise ConfigError(f"traces[{k}].start_qps: must be > 0 (got {t['start_qps']!r})")
    jobs = [
        Job(m, t, c, s, tp, pp, bs)
        for m, t, c, s, tp, pp, bs in itertools.product(
            lists["models"],
            lists["traces"],
            lists["clusters"],
            lists["schedulers"],
            _ints(data, "tp_dimensions"),
            _ints(data, "pp_dimensions"),
            _ints(data, "batch_sizes"),
        )
    ]
    return [j for j in jobs if j.valid()]


# ---- one job's search (runs in a worker) ----


def _probe(job: Job, qps: float, out: Path, s: SearchSettings, cache: dict) -> float | None:
    """The scheduling-delay quantile at qps (None: the run failed)."""
    from vidur_fast.api import simulate
    from vidur_fast.config.vidur_flags import read_vidur_command
    from vidur_fast.errors import UserError
    from vidur_fast.outputs.writer import write_run

    run_dir = out / "runs" / job.hash() / f"{qps}"
    delay_file = run_dir / "request_metrics.csv"
    if (run_dir / "summary.json").is_file() and delay_file.is_file():
        delays = pd.read_csv(delay_file)["request_scheduling_delay"]
        return float(delays.quantile(s.scheduling_delay_slo_quantile))
    try:
        cmd = read_vidur_command(job.vidur_args(qps, s.time_limit_min * 60), embedded_fallback=True)
        output = OutputConfig(
            dir=str(run_dir), write_metrics_h5=False, overwrite=True, vidur_plots="main"
        )
        cfg = dataclasses.replace(cmd.config, output=output, quiet=True)
        result = simulate(cfg, timing_cache=cache)
        write_run(result, cfg.output)
    except UserError as exc:
        (out / "runs" / job.hash()).mkdir(parents=True, exist_ok=True)
        (out / "runs" / job.hash() / "error.txt").write_text(str(exc) + "\n")
        return None
    delays = result.requests["request_scheduling_delay"]
    return float(delays.quantile(s.scheduling_delay_slo_quantile))


def search_qps(probe, start_qps: float, s: SearchSettings) -> tuple[float | None, int]:
    """Vidur's capacity search: bisect on QPS from [0, 2 x start_qps], widening the bracket
    while the delay is far under the SLO, until it is narrower than the granularity. probe(qps)
    gives the delay quantile (None: the run failed, which ends the search). Returns the highest
    QPS found under the SLO (None if none) and the number of probes."""
    left, right, qps = 0.0, 2.0 * float(start_qps), 0.0
    best, lowest_over = None, float("inf")
    probes = 0
    for _ in range(s.max_iterations):
        if abs(left - right) < s.min_search_granularity * qps / 100:
            break
        qps = (left + right) / 2
        delay = probe(qps)
        probes += 1
        if delay is None:
            break
        slo = s.scheduling_delay_slo_value
        if delay <= slo:
            best = qps
            if delay < slo / 8:
                right = min(right * 4, lowest_over)
            elif delay < slo / 4 or qps > 0.8 * right:
                right = min(right * 2, lowest_over)
            left = qps
        else:
            right = qps / 2 if delay > HOPELESS_DELAY_S else qps
            lowest_over = min(lowest_over, qps)
    return best, probes


def search_job(task: tuple[Job, str, SearchSettings]) -> dict[str, Any]:
    """One job's search (in a worker process); its result row."""
    job, out_dir, s = task
    out, cache = Path(out_dir), {}
    best, probes = search_qps(
        lambda qps: _probe(job, qps, out, s, cache), job.trace["start_qps"], s
    )
    row = {**job.row(), "max_qps_under_sla": best, "probes": probes}
    if best is not None:
        summary = json.loads((out / "runs" / job.hash() / f"{best}" / "summary.json").read_text())
        row["ttft_p90_s"] = summary["prefill_e2e_time"]["p90"]
        row["tbt_p99_s"] = summary["tbt"]["p99"]
        # Vidur's dashboard metric: sustainable QPS per dollar of GPU time per hour
        row["qps_per_dollar"] = best / row["cost_per_hour_usd"]
    return row


# ---- all jobs ----


def run_explorer(
    config_path: str,
    output_dir: str,
    settings: SearchSettings,
    *,
    executor: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    quiet: bool = False,
) -> pd.DataFrame:
    """Search every job of the file in parallel; write OUTPUT/results.csv (one row per job, in
    expansion order, with max_qps_under_sla, cost and Pareto flags) and Pareto plots."""
    from vidur_fast.explore.executors import make_executor
    from vidur_fast.explore.pareto import pareto_mask, plot_pareto

    jobs = load_jobs(config_path)
    if not jobs:
        raise ConfigError(
            "--config-path: no valid job (check num_gpus, tp_dimensions, gpus_per_node)"
        )
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    pool = make_executor(executor, workers if workers else min(len(jobs), _cpus()), ray_address)
    rows: dict[str, dict] = {}
    try:
        tasks = [(job, str(out), settings) for job in jobs]
        for (job, _, _), row, exc in pool.imap(search_job, tasks):
            if exc is not None:
                row = {**job.row(), "max_qps_under_sla": None, "error": str(exc)}
            rows[job.hash()] = row
            if not quiet:
                print(f"{job.key()}: max qps under SLO {row['max_qps_under_sla']}", flush=True)
    finally:
        pool.close()
    df = pd.DataFrame([rows[j.hash()] for j in jobs])
    for col in ("ttft_p90_s", "tbt_p99_s", "qps_per_dollar"):
        if col not in df:
            df[col] = float("nan")
    dollars_per_qps = 1.0 / df["qps_per_dollar"].astype(float)
    for latency, name in (("ttft_p90_s", "ttft_p90"), ("tbt_p99_s", "tbt_p99")):
        df[f"pareto_{name}"] = pareto_mask(df[latency].to_numpy(float), dollars_per_qps.to_numpy())
    df.to_csv(out / "results.csv", index=False)
    plot_df = df.assign(dollars_per_qps=dollars_per_qps, label=df["job_hash"])
    for latency, name in (("ttft_p90_s", "ttft_p90"), ("tbt_p99_s", "tbt_p99")):
        plot_pareto(
            plot_df.assign(pareto=df[f"pareto_{name}"]),
            latency,
            "dollars_per_qps",
            "label",
            out / f"pareto_{name}.png",
            f"cost per QPS vs {name} at the highest QPS under the SLO",
        )
    return df


def _cpus() -> int:
    import os

    return max(1, (os.cpu_count() or 2) - 2)
