"""Vidur's own flat command-line flags (main branch) -> a SimConfig.

Each flag names a config field (the tables below); its text is read by the field's type and
the whole config is built by the one converter (config.convert), so types and field rules are
the config's own. A flag left out means Vidur's default: where that differs from vidur-fast's,
VIDUR_DEFAULTS states Vidur's value; everywhere else the config's default applies as it is.
Flags that only drive Vidur's own output plumbing (wandb, plots, chrome trace, caches) are
accepted and ignored with one notice on stderr.
"""

import copy
import sys
from pathlib import Path
from typing import Any

from vidur_fast.config.convert import build_dataclass, field_types, parse_text
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.sim import (
    ClusterConfig,
    FasterTransformerScheduler,
    LightLLMScheduler,
    OrcaScheduler,
    SarathiScheduler,
    SimConfig,
    VllmV0Scheduler,
)
from vidur_fast.config.workload import (
    FixedLengths,
    GammaIntervals,
    PoissonIntervals,
    StaticIntervals,
    SyntheticWorkload,
    TraceLengths,
    TraceWorkload,
    UniformLengths,
    ZipfLengths,
)
from vidur_fast.errors import ConfigError

# Vidur main's defaults where they differ from vidur-fast's (its config dataclasses).
VIDUR_DEFAULTS: dict[str, Any] = {
    "seed": 42,
    "cluster": {"model": "meta-llama/Llama-2-7b-hf", "device": "a100"},
    "predictor": {
        "source": "vidur",
        "profile_dir": "data/profiling",
        "n_estimators": 250,
        "max_depth": 32,
        "max_tokens": 4096,
        "max_batch_size": 128,
        "max_prefill_chunk": 4096,
        # Vidur keys prefill chunks exactly
        "chunk_granularity": 1,
        "decode_batching_overhead": 0.1,
        "prefill_batching_overhead": 0.1,
        "nccl_launch_overhead_ms": 0.02,
        "kv_rule": "per_request",
        # Vidur fits its forests on raw operator time
        "work_normalized": False,
    },
}
# the request generator's token cap, which Vidur also hands to the replica scheduler
VIDUR_MAX_TOKENS = 4096
SYNTHETIC_DEFAULTS = {"num_requests": 128, "max_tokens": VIDUR_MAX_TOKENS}
TRACE_DEFAULTS = {
    "path": "data/processed_traces/splitwise_conv.csv",
    "format": "vidur",
    "max_tokens": VIDUR_MAX_TOKENS,
    # Vidur's trace replay takes the excess over max_tokens from the prompt
    "clip": "prompt",
}
TRACE_LENGTHS_DEFAULTS = {"path": "data/processed_traces/sharegpt.csv"}
# Vidur's Poisson generator truncates arrival times; its rates default lower
INTERVAL_DEFAULTS = {"poisson": {"qps": 0.5, "truncate": True}, "gamma": {"qps": 0.2}}

CLUSTER_FLAGS = {
    "--replica_config_model_name": "model",
    "--replica_config_device": "device",
    "--replica_config_network_device": "node",
    "--replica_config_tensor_parallel_size": "tp",
    "--replica_config_num_pipeline_stages": "pp",
    "--cluster_config_num_replicas": "num_replicas",
    "--replica_config_memory_margin_fraction": "memory_margin_fraction",
}
RUN_FLAGS = {"--seed": "seed", "--time_limit": "time_limit_s"}
# Vidur scheduler type -> (config member name, class); its flags are --{type}_scheduler_config_
# followed by the field's own name
SCHEDULERS = {
    "sarathi": SarathiScheduler,
    "vllm": VllmV0Scheduler,
    "orca": OrcaScheduler,
    "faster_transformer": FasterTransformerScheduler,
    "lightllm": LightLLMScheduler,
}
# Vidur's scheduler flags that name no field of that scheduler here (Vidur reads none of them)
SCHEDULER_FLAGS_UNUSED = ("watermark_blocks_fraction",)
# Vidur main's lor counts only the waiting queue
ROUTERS = {"round_robin": "round_robin", "random": "random", "lor": "least_waiting"}
TRACE_FLAGS = {
    "trace_file": "path",
    "prefill_scale_factor": "prefill_scale",
    "decode_scale_factor": "decode_scale",
    "time_scale_factor": "time_scale",
    "max_tokens": "max_tokens",
}
SYNTHETIC_FLAGS = {"num_requests": "num_requests", "duration": "duration_s"}
LENGTHS = {
    "fixed": (FixedLengths, {}),
    "uniform": (UniformLengths, {}),
    "zipf": (ZipfLengths, {}),
    "trace": (
        TraceLengths,
        {
            "trace_file": "path",
            "prefill_scale_factor": "prefill_scale",
            "decode_scale_factor": "decode_scale",
        },
    ),
}
INTERVALS = {"poisson": PoissonIntervals, "gamma": GammaIntervals, "static": StaticIntervals}
PREDICTORS = {
    "random_forrest": ("--random_forrest_execution_time_predictor_config_", "random_forest"),
    "linear_regression": ("--linear_regression_execution_time_predictor_config_", "polynomial"),
}
PREDICTOR_FLAGS = {
    "prediction_max_tokens_per_request": "max_tokens",
    "prediction_max_batch_size": "max_batch_size",
    "prediction_max_prefill_chunk_size": "max_prefill_chunk",
    "kv_cache_prediction_granularity": "kv_granularity",
    "attention_decode_batching_overhead_fraction": "decode_batching_overhead",
    "attention_prefill_batching_overhead_fraction": "prefill_batching_overhead",
    "nccl_cpu_launch_overhead_ms": "nccl_launch_overhead_ms",
}
# flags whose value is a list in Vidur (a hyper-parameter grid); the first value is used
PREDICTOR_GRID_FLAGS = {
    "num_estimators": "n_estimators",
    "max_depth": "max_depth",
    "min_samples_split": "min_samples_split",
    "polynomial_degree": "polynomial_degree",
}
# predictor inputs and settings with no counterpart here (profiles come from one directory)
PREDICTOR_FLAGS_UNUSED = (
    "attention_input_file",
    "all_reduce_input_file",
    "send_recv_input_file",
    "cpu_overhead_input_file",
    "k_fold_cv_splits",
    "no_cache",
    "num_training_job_threads",
    "skip_cpu_overhead_modeling",
    "polynomial_include_bias",
    "polynomial_interaction_only",
    "fit_intercept",
)
IGNORED_PREFIXES = ("--metrics_config_", "--no-metrics_config_", "--log_level", "--write_")


def _parse_flat(argv: list[str]) -> dict[str, list[str]]:
    """--flag v1 [v2 ...] / --flag / --flag=v into {flag: [values]}."""
    out: dict[str, list[str]] = {}
    key = None
    for tok in argv:
        if tok.startswith("--"):
            if "=" in tok:
                k, v = tok.split("=", 1)
                out[k] = [v]
                key = None
                continue
            key = tok
            out[key] = []
        elif key is None:
            raise ConfigError(f"vidur-compat: unexpected argument {tok!r}")
        else:
            out[key].append(tok)
    return out


class _Flags:
    """The parsed flags; each lookup marks its flag as used, so that leftovers are known."""

    def __init__(self, flags: dict[str, list[str]]):
        self.flags = flags
        self.used: set[str] = set()

    def text(self, name: str, default: str | None = None) -> str | None:
        if name not in self.flags:
            return default
        self.used.add(name)
        values = self.flags[name]
        if not values:
            raise ConfigError(f"vidur-compat: {name} needs a value")
        return values[0]

    def switch(self, name: str) -> bool | None:
        """--name -> True, --no-name -> False, absent -> None."""
        if name in self.flags:
            self.used.add(name)
            return True
        neg = "--no-" + name[2:]
        if neg in self.flags:
            self.used.add(neg)
            return False
        return None

    def accept(self, name: str) -> None:
        """A flag Vidur has and the config does not need: read and dropped."""
        for key in (name, "--no-" + name[2:]):
            if key in self.flags:
                self.used.add(key)

    def put(self, data: dict, cls: type, field: str, flag: str) -> None:
        """data[field] from flag, read as cls's field type (booleans as switches)."""
        tp = field_types(cls)[field]
        if tp is bool:
            value = self.switch(flag)
            if value is not None:
                data[field] = value
            return
        text = self.text(flag)
        if text is not None:
            data[field] = parse_text(tp, text, flag)

    def put_all(self, data: dict, cls: type, prefix: str, names: dict[str, str]) -> None:
        for suffix, field in names.items():
            self.put(data, cls, field, prefix + suffix)


def _profile_dir(compute_file: str) -> str:
    """Vidur's compute_input_file template -> the profiling root it sits under."""
    parts = Path(compute_file).parts
    if "compute" not in parts:
        raise ConfigError(
            "vidur-compat: --*_compute_input_file must follow Vidur's layout "
            ".../compute/{DEVICE}/{MODEL}/mlp.csv"
        )
    return str(Path(*parts[: parts.index("compute")]))


def _choice(f: _Flags, flag: str, default: str, allowed) -> str:
    value = f.text(flag, default)
    if value not in allowed:
        raise ConfigError(f"vidur-compat: {flag} {value!r}; allowed: {', '.join(allowed)}")
    return value


def config_from_vidur_args(argv: list[str]) -> SimConfig:
    """A SimConfig from Vidur main's flags; raises ConfigError naming the first bad flag."""
    f = _Flags(_parse_flat(argv))
    data = copy.deepcopy(VIDUR_DEFAULTS)
    f.put_all(data, SimConfig, "", RUN_FLAGS)
    cluster = data["cluster"]
    f.put_all(cluster, ClusterConfig, "", CLUSTER_FLAGS)
    cluster.setdefault("node", f"{cluster['device']}_pairwise_nvlink")
    data["workload"], max_tokens = _workload(f)
    data["scheduler"] = _scheduler(f, max_tokens)
    data["router"] = ROUTERS[
        _choice(f, "--global_scheduler_config_type", "round_robin", list(ROUTERS))
    ]
    _predictor(f, data["predictor"])
    ignored = [k for k in f.flags if k not in f.used and k.startswith(IGNORED_PREFIXES)]
    unknown = [k for k in f.flags if k not in f.used and k not in ignored]
    if unknown:
        raise ConfigError(f"vidur-compat: unknown or unsupported flag {unknown[0]}")
    if ignored:
        print("notice: ignoring Vidur output flags: " + " ".join(sorted(ignored)), file=sys.stderr)
    return build_dataclass(SimConfig, data, "")


def _scheduler(f: _Flags, max_tokens: int) -> dict:
    stype = f.text("--replica_scheduler_config_type", "sarathi")
    if stype not in SCHEDULERS:
        raise ConfigError(
            f"vidur-compat: --replica_scheduler_config_type {stype!r}; supported: "
            + ", ".join(SCHEDULERS)
        )
    cls = SCHEDULERS[stype]
    prefix = f"--{stype}_scheduler_config_"
    out: dict[str, Any] = {"type": stype, "max_tokens": max_tokens}
    for flag in [k for k in f.flags if k.startswith(prefix)]:
        field = flag[len(prefix) :]
        if field in field_types(cls) and field != "max_tokens":
            f.put(out, cls, field, flag)
        elif field in SCHEDULER_FLAGS_UNUSED:
            f.accept(flag)
    return out


def _workload(f: _Flags) -> tuple[dict, int]:
    """The workload as plain data and the token cap Vidur passes on to the scheduler."""
    gen = _choice(f, "--request_generator_config_type", "synthetic", ("synthetic", "trace_replay"))
    if gen == "trace_replay":
        prefix = "--trace_request_generator_config_"
        out = {"type": "trace", **TRACE_DEFAULTS}
        f.put_all(out, TraceWorkload, prefix, TRACE_FLAGS)
        f.accept(prefix + "seed")
        return out, out["max_tokens"]
    prefix = "--synthetic_request_generator_config_"
    out = {"type": "synthetic", **SYNTHETIC_DEFAULTS}
    f.put_all(out, SyntheticWorkload, prefix, SYNTHETIC_FLAGS)
    f.accept(prefix + "seed")  # the top-level --seed drives all randomness here
    if out.get("duration_s") is not None:
        out["num_requests"] = None
    ltype = _choice(f, "--length_generator_config_type", "fixed", list(LENGTHS))
    lcls, renamed = LENGTHS[ltype]
    lprefix = f"--{ltype}_request_length_generator_config_"
    lengths: dict[str, Any] = {"type": ltype}
    if ltype == "trace":
        lengths.update(TRACE_LENGTHS_DEFAULTS)
    f.put(out, SyntheticWorkload, "max_tokens", lprefix + "max_tokens")
    names = renamed or {name: name for name in field_types(lcls) if name != "max_tokens"}
    f.put_all(lengths, lcls, lprefix, names)
    if "max_tokens" in field_types(lcls):
        lengths["max_tokens"] = out["max_tokens"]
    f.accept(lprefix + "seed")
    out["lengths"] = lengths
    itype = _choice(f, "--interval_generator_config_type", "poisson", list(INTERVALS))
    icls = INTERVALS[itype]
    iprefix = f"--{itype}_request_interval_generator_config_"
    intervals: dict[str, Any] = {"type": itype, **INTERVAL_DEFAULTS.get(itype, {})}
    f.put_all(intervals, icls, iprefix, {n: n for n in ("qps", "cv") if n in field_types(icls)})
    f.accept(iprefix + "seed")
    out["intervals"] = intervals
    return out, out["max_tokens"]


def _predictor(f: _Flags, out: dict) -> None:
    ptype = _choice(f, "--execution_time_predictor_config_type", "random_forrest", PREDICTORS)
    prefix, regressor = PREDICTORS[ptype]
    out["regressor"] = regressor
    compute_file = f.text(prefix + "compute_input_file")
    if compute_file is not None:
        out["profile_dir"] = _profile_dir(compute_file)
    f.put_all(out, PredictorConfig, prefix, PREDICTOR_FLAGS)
    for suffix, field in PREDICTOR_GRID_FLAGS.items():
        if f.flags.get(prefix + suffix):
            f.flags[prefix + suffix] = f.flags[prefix + suffix][:1]
        f.put(out, PredictorConfig, field, prefix + suffix)
    for other, _ in PREDICTORS.values():
        for suffix in PREDICTOR_FLAGS_UNUSED:
            f.accept(other + suffix)
