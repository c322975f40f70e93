"""Vidur's own flat command-line flags (its main line and its canary line) -> a SimConfig.

Each flag names a config field (the tables below); its text is read by the field's type and
the whole config is built by the one converter (config.convert), so types and field rules are
the config's own. A flag left out means Vidur's default for that line: where it differs from
vidur-fast's, the line's defaults below state Vidur's value; everywhere else the config's
default applies as it is. A command is read as canary when it uses any flag or value only the
canary line has (vllm_v1, cache_config, the new routers, trace, random_forest, ...).
Flags that only drive Vidur's own output plumbing are accepted and ignored with one notice.
"""

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vidur_fast.catalog import get_device
from vidur_fast.config.convert import build_dataclass, field_types, parse_text
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.sim import (
    ClusterConfig,
    FasterTransformerScheduler,
    LightLLMScheduler,
    OrcaScheduler,
    OutputConfig,
    RankedStickyLopUncachedRouter,
    SarathiScheduler,
    SimConfig,
    TolerantStickyLopUncachedRouter,
    VllmV0Scheduler,
    VllmV1Scheduler,
)
from vidur_fast.config.workload import (
    FixedLengths,
    GammaIntervals,
    PoissonIntervals,
    StaticIntervals,
    SyntheticWorkload,
    TraceLengths,
    TraceWorkload,
    UniformIntervals,
    UniformLengths,
    ZipfLengths,
)
from vidur_fast.errors import ConfigError

MAIN, CANARY = "main", "canary"

# ---- Vidur's defaults where they differ from vidur-fast's ----

# Vidur's random-forest predictor on its own profiling data (both lines)
VIDUR_PREDICTOR = {
    "source": "vidur",
    "profile_dir": "data/profiling",
    "n_estimators": 250,
    "max_depth": 32,
    "max_tokens": 4096,
    "max_batch_size": 128,
    "max_prefill_chunk": 4096,
    # Vidur main keys prefill chunks exactly
    "chunk_granularity": 1,
    "decode_batching_overhead": 0.1,
    "prefill_batching_overhead": 0.1,
    "nccl_launch_overhead_ms": 0.02,
    "kv_rule": "per_request",
    # Vidur fits its forests on raw operator time
    "work_normalized": False,
    # ... with trees seeded from the NumPy RNG that --seed seeds (main; random_state = seed)
    "vidur_forests": True,
    # Vidur's engine has no sampler term outside its profiled operators
    "sampler_ms": 0.0,
    "sampler_per_seq_ms": 0.0,
    # ... nor a launch floor for steps outside CUDA graphs
    "eager_launch_ms_per_layer": 0.0,
    "graph_max_tokens": 0,
}
DEFAULTS: dict[str, dict[str, Any]] = {
    MAIN: {
        "seed": 42,
        "cluster": {"model": "meta-llama/Llama-2-7b-hf", "device": "a100", "memory_model": "vidur"},
        "predictor": VIDUR_PREDICTOR,
    },
    CANARY: {
        "seed": 42,
        "cluster": {"model": "meta-llama/Llama-2-7b-hf", "device": "a100", "memory_model": "vidur"},
        "predictor": {
            **VIDUR_PREDICTOR,
            "max_tokens": 262144,
            "max_batch_size": 512,
            "chunk_granularity": 32,
            "decode_batching_overhead": 0.0,
            "prefill_batching_overhead": 0.0,
            "nccl_launch_overhead_ms": 0.0,
            # canary rounds the batch's summed kv once
            "kv_rule": "sum",
            # canary trains its models inside the prediction functions, prefill on (kv, chunk):
            # its seed order is not reproduced
            "vidur_forests": False,
        },
    },
}
# the request generator's token cap, which Vidur main also hands to the replica scheduler;
# canary has none by default
MAX_TOKENS = {MAIN: 4096, CANARY: None}
SYNTHETIC_DEFAULTS = {"num_requests": 128}
TRACE_DEFAULTS = {
    "path": "data/processed_traces/splitwise_conv.csv",
    "format": "vidur",
    # Vidur's trace replay takes the excess over max_tokens from the prompt
    "clip": "prompt",
}
TRACE_LENGTHS_DEFAULTS = {
    MAIN: {"path": "data/processed_traces/sharegpt.csv"},
    # canary keeps the file's row order unless told otherwise (preserve_request_order)
    CANARY: {"path": "data/processed_traces/sharegpt.csv", "shuffle": False},
}
# Vidur's Poisson generator truncates gaps at 3/qps; its rates default lower
INTERVAL_DEFAULTS = {
    "poisson": {"qps": 0.5, "truncate": True},
    "gamma": {"qps": 0.2},
    "uniform": {"qps": 0.2},
}
# canary's vllm_v1: chunk_size is the token budget, batch_size_cap the sequence cap;
# prefix caching off unless asked; a synchronous engine loop with every prefill of the budget
# in one step (Vidur's semantics, not the vllm_v1 scheduler's vLLM-engine defaults)
VLLM_V1_DEFAULTS = {
    "max_num_batched_tokens": 512,
    "max_num_seqs": 128,
    "enable_prefix_caching": False,
    "max_num_partial_prefills": 0,
    "async_scheduling": False,
}

# ---- flag tables ----

RUN_FLAGS = {"--seed": "seed", "--time_limit": "time_limit_s"}
CLUSTER_FLAGS = {
    "--replica_config_model_name": "model",
    "--replica_config_device": "device",
    "--replica_config_network_device": "node",
    "--replica_config_tensor_parallel_size": "tp",
    "--replica_config_num_pipeline_stages": "pp",
    "--cluster_config_num_replicas": "num_replicas",
    "--replica_config_memory_margin_fraction": "memory_margin_fraction",
    "--cache_config_memory_margin_fraction": "memory_margin_fraction",
}
# Vidur scheduler type -> class; its flags are --{type}_scheduler_config_ followed by the
# field's own name, except where SCHEDULER_RENAMES says otherwise
SCHEDULERS = {
    "sarathi": SarathiScheduler,
    "vllm": VllmV0Scheduler,
    "orca": OrcaScheduler,
    "faster_transformer": FasterTransformerScheduler,
    "lightllm": LightLLMScheduler,
    "vllm_v1": VllmV1Scheduler,
}
SCHEDULER_RENAMES = {
    "vllm_v1": {"chunk_size": "max_num_batched_tokens", "batch_size_cap": "max_num_seqs"}
}
# scheduler flags Vidur has and reads nowhere for that scheduler
SCHEDULER_FLAGS_UNUSED = ("watermark_blocks_fraction",)
CACHE_FLAGS = {
    "block_size": "block_size",
    "num_blocks": "num_blocks",
    "watermark_blocks_fraction": "watermark_blocks_fraction",
    "enable_prefix_caching": "enable_prefix_caching",
}
CACHE_HASH_ALGOS = ("builtin", "sha256")
# Vidur router -> config router. Main's lor counts only the waiting queue; canary's counts the
# requests routed and not finished; canary's guide describes sticky as "pin the session, new
# sessions by lop"; the other canary routers have config routers of the same name
ROUTERS = {
    MAIN: {"round_robin": "round_robin", "random": "random", "lor": "least_waiting"},
    CANARY: {
        "round_robin": "round_robin",
        "random": "random",
        "lor": "lor",
        "lop": "lop",
        "sticky": "sticky",
        "lop_binary": "lop_binary",
        "lop_batch_end": "lop_batch_end",
        "lop_uncached": "lop_uncached",
        "sticky_round_robin": "sticky_round_robin",
        "sticky_lor": "sticky_lor",
        "tolerant_sticky_lop_uncached": "tolerant_sticky_lop_uncached",
        "ranked_sticky_lop_uncached": "ranked_sticky_lop_uncached",
    },
}
# canary router knobs: router type -> {flag suffix: field of the config router}
ROUTER_KNOBS = {
    "tolerant_sticky_lop_uncached": (
        TolerantStickyLopUncachedRouter,
        {"tolerance_factor": "tolerance_factor"},
    ),
    "ranked_sticky_lop_uncached": (RankedStickyLopUncachedRouter, {"top_k": "top_k"}),
}
ROUTER_SEED_SUFFIX = "_global_scheduler_config_seed"
TRACE_FLAGS = {
    "trace_file": "path",
    "prefill_scale_factor": "prefill_scale",
    "decode_scale_factor": "decode_scale",
    "time_scale_factor": "time_scale",
    "max_tokens": "max_tokens",
    "num_requests": "num_requests",
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
INTERVALS = {
    "poisson": PoissonIntervals,
    "gamma": GammaIntervals,
    "static": StaticIntervals,
    "uniform": UniformIntervals,
}
PREDICTORS = {
    "random_forrest": ("--random_forrest_execution_time_predictor_config_", "random_forest"),
    "random_forest": ("--random_forest_execution_time_predictor_config_", "random_forest"),
    "linear_regression": ("--linear_regression_execution_time_predictor_config_", "polynomial"),
}
PREDICTOR_FLAGS = {
    "prediction_max_tokens_per_request": "max_tokens",
    "prediction_max_batch_size": "max_batch_size",
    "prediction_max_prefill_chunk_size": "max_prefill_chunk",
    "kv_cache_prediction_granularity": "kv_granularity",
    "prefill_chunk_size_prediction_granularity": "chunk_granularity",
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
    "nccl_cpu_skew_overhead_per_device_ms",
    "polynomial_include_bias",
    "polynomial_interaction_only",
    "fit_intercept",
    "seed",
    "cache_mode",
    "cache_dir",
)
# Vidur output flags with a counterpart here (a switch -> an OutputConfig field)
METRICS_SWITCHES = {
    "--metrics_config_enable_chrome_trace": "write_trace",
    "--metrics_config_store_plots": "write_plots",
    "--metrics_config_store_request_metrics": "write_request_csv",
}
METRICS_OUTPUT_DIR = "--metrics_config_output_dir"
# flags accepted and ignored (with one notice): Vidur's own output plumbing, and SLOs, which
# only order Vidur's EDF queue
IGNORED_PREFIXES = (
    "--metrics_config_",
    "--no-metrics_config_",
    "--log_level",
    "--write_",
    "--slo_config_",
)
# flags and values only the canary line has
CANARY_PREFIXES = (
    "--cache_config_",
    "--vllm_v1_scheduler_config_",
    "--vllm_v1_disk_scheduler_config_",
    "--random_forest_execution_time_predictor_config_",
    "--slo_config_",
    "--request_queue_config_",
    "--uniform_request_interval_generator_config_",
)
CANARY_VALUES = {
    "--replica_scheduler_config_type": ("vllm_v1", "vllm_v1_disk"),
    "--request_generator_config_type": ("trace",),
    "--execution_time_predictor_config_type": ("random_forest",),
    "--global_scheduler_config_type": (
        "lop",
        "sticky",
        "lop_binary",
        "lop_batch_end",
        "lop_uncached",
        "sticky_round_robin",
        "sticky_lor",
        "ranked_sticky_lop_uncached",
        "tolerant_sticky_lop_uncached",
    ),
    "--interval_generator_config_type": ("uniform",),
}


@dataclass
class VidurCommand:
    """A Vidur command line read into a config, with what the run directory needs."""

    config: SimConfig
    line: str
    output_base: str = "simulator_output"
    """Vidur's metrics output dir; the run directory is a timestamped folder below it."""
    notices: list[str] = field(default_factory=list)


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
            if self.flags[name]:
                raise ConfigError(
                    f"vidur-compat: {name} is a switch (--{name[2:]} or --no-{name[2:]}), "
                    f"not {name} {self.flags[name][0]}"
                )
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

    def put(self, data: dict, cls: type, field_name: str, flag: str) -> None:
        """data[field_name] from flag, read as cls's field type (booleans as switches)."""
        tp = field_types(cls)[field_name]
        if tp is bool:
            value = self.switch(flag)
            if value is not None:
                data[field_name] = value
            return
        text = self.text(flag)
        if text is not None:
            data[field_name] = parse_text(tp, text, flag)

    def put_all(self, data: dict, cls: type, prefix: str, names: dict[str, str]) -> None:
        for suffix, field_name in names.items():
            self.put(data, cls, field_name, prefix + suffix)


def vidur_line(flags: dict[str, list[str]]) -> str:
    """CANARY when the command uses a flag or value only Vidur's canary line has."""
    for flag, values in flags.items():
        bare = "--" + flag[5:] if flag.startswith("--no-") else flag
        if bare.startswith(CANARY_PREFIXES) or bare.endswith(ROUTER_SEED_SUFFIX):
            return CANARY
        if values and values[0] in CANARY_VALUES.get(flag, ()):
            return CANARY
    return MAIN


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
    """A SimConfig from Vidur's flags; raises ConfigError naming the first bad flag."""
    return read_vidur_command(argv).config


def read_vidur_command(argv: list[str], embedded_fallback: bool = False) -> VidurCommand:
    """Read a Vidur command line. embedded_fallback: when the command names no profiling data
    and Vidur's default data/profiling is not there, time with the embedded data (measured
    tables where the device has them, else the roofline) and say so in a notice; otherwise
    the timing build reports the missing directory."""
    f = _Flags(_parse_flat(argv))
    line = vidur_line(f.flags)
    cmd = VidurCommand(config=SimConfig(), line=line)
    data = copy.deepcopy(DEFAULTS[line])
    f.put_all(data, SimConfig, "", RUN_FLAGS)
    cluster = data["cluster"]
    f.put_all(cluster, ClusterConfig, "", CLUSTER_FLAGS)
    cluster.setdefault("node", f"{cluster['device']}_pairwise_nvlink")
    data["workload"], max_tokens = _workload(f, line)
    # Vidur's requests reach the replica at their arrival time: no API-server front end
    data["workload"].update(ingest_ms=0.0, response_ms=0.0)
    data["scheduler"] = _scheduler(f, line, max_tokens)
    data["router"] = _router(f, line)
    _predictor(f, data, embedded_fallback, cmd)
    data["output"] = {**_outputs(f, cmd), "vidur_plots": line}
    ignored = [k for k in f.flags if k not in f.used and k.startswith(IGNORED_PREFIXES)]
    unknown = [k for k in f.flags if k not in f.used and k not in ignored]
    if unknown:
        raise ConfigError(f"vidur-compat: unknown or unsupported flag {unknown[0]}")
    if ignored:
        cmd.notices.append("ignoring Vidur output flags: " + " ".join(sorted(ignored)))
    cmd.config = build_dataclass(SimConfig, data, "")
    return cmd


def _scheduler(f: _Flags, line: str, max_tokens: int | None) -> dict:
    allowed = list(SCHEDULERS) + (["vllm_v1_disk"] if line == CANARY else [])
    stype = f.text("--replica_scheduler_config_type", "sarathi")
    if stype == "vllm_v1_disk" or f.switch("--cache_config_enable_disk_caching"):
        raise ConfigError(
            "vidur-compat: --replica_scheduler_config_type vllm_v1_disk / "
            "--cache_config_enable_disk_caching: a disk tier of the prefix cache is not "
            "modelled; use vllm_v1 (GPU prefix cache only)"
        )
    if stype not in SCHEDULERS:
        raise ConfigError(
            f"vidur-compat: --replica_scheduler_config_type {stype!r}; supported: "
            + ", ".join(allowed)
        )
    cls = SCHEDULERS[stype]
    prefix = f"--{stype}_scheduler_config_"
    renames = SCHEDULER_RENAMES.get(stype, {})
    out: dict[str, Any] = {"type": stype}
    if stype == "vllm_v1":
        out.update(VLLM_V1_DEFAULTS)
    elif max_tokens is not None:
        out["max_tokens"] = max_tokens
    for flag in [k for k in f.flags if k.startswith(prefix)]:
        name = renames.get(flag[len(prefix) :], flag[len(prefix) :])
        if name in field_types(cls) and name != "max_tokens":
            f.put(out, cls, name, flag)
        elif name in SCHEDULER_FLAGS_UNUSED:
            f.accept(flag)
    _cache_flags(f, cls, out)
    return out


def _cache_flags(f: _Flags, cls: type, out: dict) -> None:
    """Canary's cache section: fields of the chosen scheduler where it has them."""
    prefix = "--cache_config_"
    for suffix, name in CACHE_FLAGS.items():
        flag = prefix + suffix
        if name in field_types(cls):
            f.put(out, cls, name, flag)
        elif name == "enable_prefix_caching" and f.switch(flag):
            raise ConfigError(
                f"vidur-compat: {flag}: prefix caching needs --replica_scheduler_config_type "
                "vllm_v1"
            )
        else:
            f.accept(flag)  # e.g. the watermark, which vllm_v1 does not read
    algo = f.text(prefix + "prefix_caching_hash_algo", "builtin")
    if algo not in CACHE_HASH_ALGOS:
        raise ConfigError(
            f"vidur-compat: {prefix}prefix_caching_hash_algo {algo!r}; allowed: "
            + ", ".join(CACHE_HASH_ALGOS)
        )
    # vllm_v1 allocates as vLLM does (blocks for the tokens scheduled, no preallocation), and
    # the disk tier is refused above; both settings are read and have nothing to change
    f.text(prefix + "num_preallocate_tokens")
    f.text(prefix + "disk_num_blocks")
    queue = f.text("--request_queue_config_type", "fcfs")
    if queue != "fcfs":
        raise ConfigError(
            f"vidur-compat: --request_queue_config_type {queue!r}: only fcfs is modelled"
        )


def _router(f: _Flags, line: str) -> dict:
    routers = ROUTERS[line]
    rtype = f.text("--global_scheduler_config_type", "round_robin")
    if rtype not in routers:
        raise ConfigError(
            f"vidur-compat: --global_scheduler_config_type {rtype!r}; allowed: "
            + ", ".join(routers)
        )
    out: dict[str, Any] = {"type": routers[rtype]}
    if rtype in ROUTER_KNOBS:
        cls, knobs = ROUTER_KNOBS[rtype]
        f.put_all(out, cls, f"--{rtype}_global_scheduler_config_", knobs)
    for flag in [k for k in f.flags if k.endswith(ROUTER_SEED_SUFFIX)]:
        f.accept(flag)  # tie-breaks here are deterministic given --seed
    return out


def _workload(f: _Flags, line: str) -> tuple[dict, int | None]:
    """The workload as plain data and the token cap Vidur passes on to the scheduler."""
    replay = "trace" if line == CANARY else "trace_replay"
    gen = _choice(f, "--request_generator_config_type", "synthetic", ("synthetic", replay))
    if gen == replay:
        prefix = "--trace_request_generator_config_"
        out = {"type": "trace", **TRACE_DEFAULTS, "max_tokens": MAX_TOKENS[line]}
        f.put_all(out, TraceWorkload, prefix, TRACE_FLAGS)
        f.accept(prefix + "seed")
        return out, out["max_tokens"]
    prefix = "--synthetic_request_generator_config_"
    out = {"type": "synthetic", **SYNTHETIC_DEFAULTS, "max_tokens": MAX_TOKENS[line]}
    f.put_all(out, SyntheticWorkload, prefix, SYNTHETIC_FLAGS)
    f.accept(prefix + "seed")  # the top-level --seed drives all randomness here
    if out.get("duration_s") is not None:
        out["num_requests"] = None
    ltype = _choice(f, "--length_generator_config_type", "fixed", list(LENGTHS))
    lcls, renamed = LENGTHS[ltype]
    lprefix = f"--{ltype}_request_length_generator_config_"
    lengths: dict[str, Any] = {"type": ltype}
    if ltype == "trace":
        lengths.update(TRACE_LENGTHS_DEFAULTS[line])
        keep = f.switch(lprefix + "preserve_request_order")
        if keep is not None:
            lengths["shuffle"] = not keep
    f.put(out, SyntheticWorkload, "max_tokens", lprefix + "max_tokens")
    names = renamed or {name: name for name in field_types(lcls) if name != "max_tokens"}
    f.put_all(lengths, lcls, lprefix, names)
    if "max_tokens" in field_types(lcls):
        # uniform and zipf draw totals up to the generator's cap
        lengths["max_tokens"] = out["max_tokens"] or 4096
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


def _predictor(f: _Flags, data: dict, embedded: bool, cmd: VidurCommand) -> None:
    ptype = _choice(f, "--execution_time_predictor_config_type", "random_forrest", PREDICTORS)
    # canary fixed the spelling; a random-forest command may use either prefix
    forest = ptype.startswith("random_for")
    prefixes = [PREDICTORS[ptype][0]]
    if forest:
        prefixes = [PREDICTORS["random_forrest"][0], PREDICTORS["random_forest"][0]]
    given: dict[str, Any] = {"regressor": PREDICTORS[ptype][1]}
    for prefix in prefixes:
        compute_file = f.text(prefix + "compute_input_file")
        if compute_file is not None:
            given["profile_dir"] = _profile_dir(compute_file)
        f.put_all(given, PredictorConfig, prefix, PREDICTOR_FLAGS)
        for suffix, name in PREDICTOR_GRID_FLAGS.items():
            if f.flags.get(prefix + suffix):
                f.flags[prefix + suffix] = f.flags[prefix + suffix][:1]
            f.put(given, PredictorConfig, name, prefix + suffix)
    for other, _ in PREDICTORS.values():
        for suffix in PREDICTOR_FLAGS_UNUSED:
            f.accept(other + suffix)
    out = data["predictor"]
    out.update(given)
    if out.get("regressor") != "random_forest":
        out["vidur_forests"] = False
    if out.get("vidur_forests"):
        out["random_state"] = data["seed"]
    if embedded and "profile_dir" not in given and not Path(out["profile_dir"]).is_dir():
        # a Vidur user's default command without Vidur's data: the embedded timing data, with
        # the project's settings for it and the grid extents the command asked for
        device = get_device(data["cluster"]["device"])
        source = "aiconfigurator" if device.aiconfigurator_system else "roofline"
        data["predictor"] = {
            "source": source,
            "sampler_ms": 0.0,
            "sampler_per_seq_ms": 0.0,
            "eager_launch_ms_per_layer": 0.0,
            "graph_max_tokens": 0,
        }
        data["predictor"].update(given)
        cmd.notices.append(
            f"no Vidur profiling data ({out['profile_dir']} does not exist and no "
            f"--*_compute_input_file was given): using the embedded {source} timing data "
            f"for {data['cluster']['model']} on {device.name}"
        )


def _outputs(f: _Flags, cmd: VidurCommand) -> dict:
    out: dict[str, Any] = {}
    for flag, name in METRICS_SWITCHES.items():
        value = f.switch(flag)
        if value is not None:
            out[name] = value
    base = f.text(METRICS_OUTPUT_DIR)
    if base is not None:
        cmd.output_base = base
    return out


# ---- the accepted flags, for --help ----


def _field_default(cls: type, name: str) -> Any:
    f = cls.__dataclass_fields__[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None  # a required field (a path)


def _fmt(value: Any) -> str:
    return "None" if value is None else str(value)


def accepted_flags() -> list[tuple[str, str, str]]:
    """(section, flag, default on the main line [canary's where it differs]) of every flag
    vidur-compat reads."""
    main, canary = DEFAULTS[MAIN], DEFAULTS[CANARY]
    rows: list[tuple[str, str, str]] = []

    def add(section: str, flag: str, value: Any, canary_value: Any = None) -> None:
        text = _fmt(value)
        if canary_value is not None and _fmt(canary_value) != text:
            text += f" (canary: {_fmt(canary_value)})"
        rows.append((section, flag, text))

    add("run", "--seed", main["seed"])
    add("run", "--time_limit", 0.0)
    for flag, name in CLUSTER_FLAGS.items():
        value = main["cluster"].get(name, _field_default(ClusterConfig, name))
        if name == "node":
            value = "{device}_pairwise_nvlink"
        add("cluster", flag, value)
    add("replica scheduler", "--replica_scheduler_config_type", "sarathi")
    for stype, cls in SCHEDULERS.items():
        renames = {v: k for k, v in SCHEDULER_RENAMES.get(stype, {}).items()}
        for name in field_types(cls):
            if name in ("max_tokens", "enable_prefix_caching", "async_scheduling"):
                continue
            if stype == "vllm_v1" and name not in renames:
                continue
            value = VLLM_V1_DEFAULTS.get(name) if stype == "vllm_v1" else None
            value = _field_default(cls, name) if value is None else value
            add("replica scheduler", f"--{stype}_scheduler_config_{renames.get(name, name)}", value)
    for suffix, name in CACHE_FLAGS.items():
        owner = SarathiScheduler if name == "watermark_blocks_fraction" else VllmV1Scheduler
        default = VLLM_V1_DEFAULTS.get(name, _field_default(owner, name))
        add("cache (canary)", f"--cache_config_{suffix}", default)
    add("cache (canary)", "--cache_config_prefix_caching_hash_algo", "builtin")
    add("global scheduler", "--global_scheduler_config_type", "round_robin")
    add("global scheduler", "  main", ", ".join(ROUTERS[MAIN]))
    add("global scheduler", "  canary", ", ".join(ROUTERS[CANARY]))
    add("request generator", "--request_generator_config_type", "synthetic")
    add("request generator", "  main", "synthetic, trace_replay")
    add("request generator", "  canary", "synthetic, trace")
    for suffix in SYNTHETIC_FLAGS:
        value = SYNTHETIC_DEFAULTS.get(suffix)
        add("request generator", f"--synthetic_request_generator_config_{suffix}", value)
    for suffix, name in TRACE_FLAGS.items():
        if name == "max_tokens":
            value = MAX_TOKENS[MAIN]
        else:
            value = TRACE_DEFAULTS.get(name, _field_default(TraceWorkload, name))
        add(
            "request generator",
            f"--trace_request_generator_config_{suffix}",
            value,
            "None" if name == "max_tokens" else None,
        )
    add("length generator", "--length_generator_config_type", "fixed")
    for ltype, (cls, renamed) in LENGTHS.items():
        names = renamed or {n: n for n in field_types(cls) if n != "max_tokens"}
        add("length generator", f"--{ltype}_request_length_generator_config_max_tokens", 4096, None)
        for suffix, name in names.items():
            value = TRACE_LENGTHS_DEFAULTS[MAIN].get(name) if ltype == "trace" else None
            add(
                "length generator",
                f"--{ltype}_request_length_generator_config_{suffix}",
                _field_default(cls, name) if value is None else value,
            )
    add("interval generator", "--interval_generator_config_type", "poisson")
    for itype, cls in INTERVALS.items():
        for name in ("qps", "cv"):
            if name in field_types(cls):
                value = INTERVAL_DEFAULTS.get(itype, {}).get(name, _field_default(cls, name))
                add(
                    "interval generator",
                    f"--{itype}_request_interval_generator_config_{name}",
                    value,
                )
    add("predictor", "--execution_time_predictor_config_type", "random_forrest")
    add("predictor", "  types", ", ".join(PREDICTORS))
    prefix = "--<type>_execution_time_predictor_config_"
    add(
        "predictor",
        prefix + "compute_input_file",
        "data/profiling/compute/{DEVICE}/{MODEL}/mlp.csv",
    )
    for suffix, name in {**PREDICTOR_FLAGS, **PREDICTOR_GRID_FLAGS}.items():
        value = main["predictor"].get(name, _field_default(PredictorConfig, name))
        add("predictor", prefix + suffix, value, canary["predictor"].get(name, value))
    for flag, name in METRICS_SWITCHES.items():
        add("outputs", flag, "on" if _field_default(OutputConfig, name) else "off (Vidur: on)")
    add("outputs", METRICS_OUTPUT_DIR, "simulator_output")
    add("outputs", "--output-dir", "<metrics output dir>/<timestamp>")
    return rows
