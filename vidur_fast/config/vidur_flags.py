"""Vidur's own flat command-line flags (main branch) -> a SimConfig.

Vidur's flags map onto a SimConfig; predictor flags select the `vidur` timing source with the
same random-forest settings. Flags that only drive Vidur's own output plumbing (wandb, plots,
chrome trace, caches) are accepted and ignored with a notice on stderr.
"""

import sys
from pathlib import Path

from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.sim import (
    ClusterConfig,
    FasterTransformerScheduler,
    LeastWaitingRouter,
    LightLLMScheduler,
    OrcaScheduler,
    OutputConfig,
    RandomRouter,
    RoundRobinRouter,
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

IGNORED_PREFIXES = ("--metrics_config_", "--log_level", "--write_")
SCHED_PREFIX = {
    "sarathi": "--sarathi_scheduler_config_",
    "vllm": "--vllm_scheduler_config_",
    "orca": "--orca_scheduler_config_",
    "faster_transformer": "--faster_transformer_scheduler_config_",
    "lightllm": "--lightllm_scheduler_config_",
}
PRED_PREFIXES = (
    "--random_forrest_execution_time_predictor_config_",
    "--linear_regression_execution_time_predictor_config_",
)


def _parse_flat(argv: list[str]) -> dict[str, list[str]]:
    """--flag v1 [v2 ...] / --flag / --no-flag into {flag: [values]}."""
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
    def __init__(self, flags: dict[str, list[str]]):
        self.flags = flags
        self.used: set[str] = set()

    def get(self, name: str, cast=str, default=None):
        if name not in self.flags:
            return default
        self.used.add(name)
        vals = self.flags[name]
        if not vals:
            raise ConfigError(f"vidur-compat: {name} needs a value")
        try:
            if cast is list:
                return vals
            if vals[0] in ("None", "none"):
                return None
            return cast(vals[0])
        except ValueError:
            raise ConfigError(f"vidur-compat: {name}: cannot read {vals[0]!r}") from None

    def flag(self, name: str, default: bool) -> bool:
        if name in self.flags:
            self.used.add(name)
            return True
        neg = "--no-" + name[2:]
        if neg in self.flags:
            self.used.add(neg)
            return False
        return default


def _profile_dir(compute_file: str | None) -> str | None:
    """Vidur's compute_input_file template -> the profiling root it sits under."""
    if compute_file is None:
        return None
    parts = Path(compute_file).parts
    if "compute" not in parts:
        raise ConfigError(
            "vidur-compat: --*_compute_input_file must follow Vidur's layout "
            ".../compute/{DEVICE}/{MODEL}/mlp.csv"
        )
    return str(Path(*parts[: parts.index("compute")]))


def _first_int(f: _Flags, name: str, default: int) -> int:
    vals = f.get(name, list, None)
    return int(vals[0]) if vals else default


def config_from_vidur_args(argv: list[str]) -> SimConfig:
    f = _Flags(_parse_flat(argv))
    device = f.get("--replica_config_device", str, "a100")
    cluster = ClusterConfig(
        model=f.get("--replica_config_model_name", str, "meta-llama/Llama-2-7b-hf"),
        device=device,
        node=f.get("--replica_config_network_device", str, f"{device}_pairwise_nvlink"),
        tp=f.get("--replica_config_tensor_parallel_size", int, 1),
        pp=f.get("--replica_config_num_pipeline_stages", int, 1),
        num_replicas=f.get("--cluster_config_num_replicas", int, 1),
        memory_margin_fraction=f.get("--replica_config_memory_margin_fraction", float, 0.1),
    )
    # ---- workload ----
    gen = f.get("--request_generator_config_type", str, "synthetic")
    if gen == "trace_replay":
        p = "--trace_request_generator_config_"
        max_tokens = f.get(p + "max_tokens", int, 4096)
        workload = TraceWorkload(
            path=f.get(p + "trace_file", str, "data/processed_traces/splitwise_conv.csv"),
            format="vidur",
            prefill_scale=f.get(p + "prefill_scale_factor", float, 1.0),
            decode_scale=f.get(p + "decode_scale_factor", float, 1.0),
            time_scale=f.get(p + "time_scale_factor", float, 1.0),
            max_tokens=max_tokens,
            clip="prompt",
        )
        f.get(p + "seed", int, 42)
    elif gen == "synthetic":
        workload, max_tokens = _synthetic(f)
    else:
        raise ConfigError(
            f"vidur-compat: --request_generator_config_type {gen!r}; allowed: synthetic, "
            "trace_replay"
        )
    # ---- scheduler ----
    stype = f.get("--replica_scheduler_config_type", str, "sarathi")
    if stype not in SCHED_PREFIX:
        raise ConfigError(
            f"vidur-compat: --replica_scheduler_config_type {stype!r}; supported: "
            + ", ".join(SCHED_PREFIX)
        )
    sp = SCHED_PREFIX[stype]
    common = dict(
        batch_size_cap=f.get(sp + "batch_size_cap", int, 128),
        block_size=f.get(sp + "block_size", int, 16),
        num_blocks=f.get(sp + "num_blocks", int, None),
        max_tokens=max_tokens,
    )
    wm = f.get(sp + "watermark_blocks_fraction", float, 0.01)
    if stype == "sarathi":
        sched = SarathiScheduler(
            chunk_size=f.get(sp + "chunk_size", int, 512), watermark_blocks_fraction=wm, **common
        )
    elif stype == "vllm":
        sched = VllmV0Scheduler(
            max_tokens_in_batch=f.get(sp + "max_tokens_in_batch", int, 4096),
            watermark_blocks_fraction=wm,
            **common,
        )
    elif stype == "lightllm":
        sched = _lightllm(f, sp, common)
    elif stype == "orca":
        sched = OrcaScheduler(**common)
    else:
        sched = FasterTransformerScheduler(**common)
    # ---- router ----
    rtype = f.get("--global_scheduler_config_type", str, "round_robin")
    routers = {
        "round_robin": RoundRobinRouter(),
        "random": RandomRouter(),
        # Vidur main's lor counts only the waiting queue
        "lor": LeastWaitingRouter(),
    }
    if rtype not in routers:
        raise ConfigError(
            f"vidur-compat: --global_scheduler_config_type {rtype!r}; allowed: "
            + ", ".join(routers)
        )
    # ---- predictor ----
    ptype = f.get("--execution_time_predictor_config_type", str, "random_forrest")
    pp = PRED_PREFIXES[0] if ptype == "random_forrest" else PRED_PREFIXES[1]
    if ptype not in ("random_forrest", "linear_regression"):
        raise ConfigError(
            f"vidur-compat: --execution_time_predictor_config_type {ptype!r}; allowed: "
            "random_forrest, linear_regression"
        )
    for other in PRED_PREFIXES:
        for name in (
            "attention_input_file",
            "all_reduce_input_file",
            "send_recv_input_file",
            "cpu_overhead_input_file",
            "k_fold_cv_splits",
            "no_cache",
            "num_training_job_threads",
            "skip_cpu_overhead_modeling",
        ):
            f.flags.pop(other + name, None)
            f.flags.pop("--no-" + other[2:] + name, None)
    predictor = PredictorConfig(
        source="vidur",
        profile_dir=_profile_dir(f.get(pp + "compute_input_file", str, None)) or "data/profiling",
        regressor="random_forest" if ptype == "random_forrest" else "polynomial",
        n_estimators=_first_int(f, pp + "num_estimators", 250),
        max_depth=_first_int(f, pp + "max_depth", 32),
        min_samples_split=_first_int(f, pp + "min_samples_split", 2),
        polynomial_degree=_first_int(f, pp + "polynomial_degree", 3),
        max_tokens=f.get(pp + "prediction_max_tokens_per_request", int, 4096),
        max_batch_size=f.get(pp + "prediction_max_batch_size", int, 128),
        max_prefill_chunk=f.get(pp + "prediction_max_prefill_chunk_size", int, 4096),
        kv_granularity=f.get(pp + "kv_cache_prediction_granularity", int, 64),
        chunk_granularity=1,
        decode_batching_overhead=f.get(
            pp + "attention_decode_batching_overhead_fraction", float, 0.1
        ),
        prefill_batching_overhead=f.get(
            pp + "attention_prefill_batching_overhead_fraction", float, 0.1
        ),
        nccl_launch_overhead_ms=f.get(pp + "nccl_cpu_launch_overhead_ms", float, 0.02),
        kv_rule="per_request",
        # Vidur fits its forests on raw operator time
        work_normalized=False,
    )
    for name in ("polynomial_include_bias", "polynomial_interaction_only", "fit_intercept"):
        f.get(pp + name, list, None)
    seed = f.get("--seed", int, 42)
    time_limit = f.get("--time_limit", float, 0.0)
    ignored = [k for k in f.flags if k not in f.used and k.startswith(IGNORED_PREFIXES)]
    unknown = [k for k in f.flags if k not in f.used and k not in ignored]
    if unknown:
        raise ConfigError(f"vidur-compat: unknown or unsupported flag {unknown[0]}")
    if ignored:
        print("notice: ignoring Vidur output flags: " + " ".join(sorted(ignored)), file=sys.stderr)
    return SimConfig(
        cluster=cluster,
        workload=workload,
        scheduler=sched,
        router=routers[rtype],
        predictor=predictor,
        output=OutputConfig(),
        seed=seed,
        time_limit_s=time_limit,
    )


def _lightllm(f: _Flags, sp: str, common: dict) -> LightLLMScheduler:
    """Vidur's lightllm flags. Vidur asserts block size 1 while defaulting to 16, so an absent
    block-size flag means 1 here; the watermark flag is accepted and unused, as in Vidur."""
    return LightLLMScheduler(
        max_tokens_in_batch=f.get(sp + "max_tokens_in_batch", int, 4096),
        max_waiting_iters=f.get(sp + "max_waiting_iters", int, 10),
        **{**common, "block_size": f.get(sp + "block_size", int, 1)},
    )


def _synthetic(f: _Flags):
    seed = f.get("--synthetic_request_generator_config_seed", int, 42)
    del seed  # the top-level --seed drives all randomness here
    n = f.get("--synthetic_request_generator_config_num_requests", int, 128)
    duration = f.get("--synthetic_request_generator_config_duration", float, None)
    ltype = f.get("--length_generator_config_type", str, "fixed")
    lp = f"--{ltype}_request_length_generator_config_"
    max_tokens = f.get(lp + "max_tokens", int, 4096)
    f.get(lp + "seed", int, 42)
    if ltype == "fixed":
        lengths = FixedLengths(
            f.get(lp + "prefill_tokens", int, 2048), f.get(lp + "decode_tokens", int, 512)
        )
    elif ltype == "uniform":
        lengths = UniformLengths(
            f.get(lp + "min_tokens", int, 1024),
            max_tokens,
            f.get(lp + "prefill_to_decode_ratio", float, 20.0),
        )
    elif ltype == "zipf":
        lengths = ZipfLengths(
            f.get(lp + "theta", float, 0.6),
            f.flag(lp + "scramble", False),
            f.get(lp + "min_tokens", int, 1024),
            max_tokens,
            f.get(lp + "prefill_to_decode_ratio", float, 20.0),
        )
    elif ltype == "trace":
        lengths = TraceLengths(
            f.get(lp + "trace_file", str, "data/processed_traces/sharegpt.csv"),
            f.get(lp + "prefill_scale_factor", float, 1.0),
            f.get(lp + "decode_scale_factor", float, 1.0),
        )
    else:
        raise ConfigError(f"vidur-compat: --length_generator_config_type {ltype!r}")
    itype = f.get("--interval_generator_config_type", str, "poisson")
    ip = f"--{itype}_request_interval_generator_config_"
    f.get(ip + "seed", int, 42)
    if itype == "poisson":
        intervals = PoissonIntervals(f.get(ip + "qps", float, 0.5), truncate=True)
    elif itype == "gamma":
        intervals = GammaIntervals(f.get(ip + "qps", float, 0.2), f.get(ip + "cv", float, 0.5))
    elif itype == "static":
        intervals = StaticIntervals()
    else:
        raise ConfigError(
            f"vidur-compat: --interval_generator_config_type {itype!r}; allowed: poisson, "
            "gamma, static"
        )
    wl = SyntheticWorkload(
        num_requests=None if duration else n,
        duration_s=duration,
        lengths=lengths,
        intervals=intervals,
        max_tokens=max_tokens,
    )
    return wl, max_tokens
