"""build_timing: operator samples -> fitted models -> dense grids, through the on-disk cache."""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

import numpy as np

from vidur_fast.catalog import (
    DeviceSpec,
    ModelSpec,
    NodeSpec,
    default_node_for,
    get_device,
    get_model,
    get_node,
)
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.validate import validate_predictor
from vidur_fast.errors import ProfileError
from vidur_fast.kernels.codes import KV_RULE_PER_REQUEST, KV_RULE_SUM
from vidur_fast.kernels.timing import TimingGrids, TimingParams
from vidur_fast.timing.cache import (
    CacheCorrupt,
    CacheMiss,
    cache_key,
    entry_paths,
    load_entry,
    resolve_cache_dir,
    save_entry,
    value_settings,
)
from vidur_fast.timing.fit import clean_rows, fit_all, fit_op, mape, op_tables
from vidur_fast.timing.grids import GRID_FIELDS, build_grids, evaluate_points, make_grids
from vidur_fast.timing.input_memo import input_fingerprint, read_memo, write_memo
from vidur_fast.timing.samples import OperatorSamples

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "TimingModel",
    "build_timing",
    "held_out_accuracy",
    "timing_from_samples",
    "timing_params",
]

_GRID_STAGES = 4  # token ops, collectives, decode, prefill (see grids.build_grids)


@dataclass(frozen=True)
class TimingModel:
    """Everything the timing kernel needs for one replica configuration."""

    grids: TimingGrids
    params: TimingParams
    meta: dict
    """key, source, provenance, settings, per-operator fit stats, from_cache, cache_path."""


def timing_params(model: ModelSpec, tp: int, pp: int, cfg: PredictorConfig) -> TimingParams:
    """Run-time timing parameters; batching overheads apply to GQA models only."""
    gqa = model.is_gqa
    return TimingParams(
        g=cfg.kv_granularity,
        gc=cfg.chunk_granularity,
        layers_per_stage=model.num_layers // pp,
        decode_overhead=float(cfg.decode_batching_overhead) if gqa else 0.0,
        prefill_overhead=float(cfg.prefill_batching_overhead) if gqa else 0.0,
        cpu_overhead_ms=float(cfg.cpu_overhead_ms),
        cpu_overhead_per_seq_ms=float(cfg.cpu_overhead_per_seq_ms),
        # None (the engine default left unresolved, config/engine.py): no sampler term
        sampler_ms=float(cfg.sampler_ms or 0.0),
        sampler_per_seq_ms=float(cfg.sampler_per_seq_ms or 0.0),
        eager_ms_per_layer=float(cfg.eager_launch_ms_per_layer or 0.0),
        graph_max_tokens=int(cfg.graph_max_tokens or 0),
        kv_rule=KV_RULE_PER_REQUEST if cfg.kv_rule == "per_request" else KV_RULE_SUM,
        tp=tp,
        pp=pp,
        # MoE layers: expert time grows with every token even in tiny batches, and vLLM
        # replays CUDA graphs captured at 1, 2, 4, 8, 16, ... tokens; dense GEMMs are flat
        # there, so dense models keep the round-up-to-8 rule
        pow2_tokens_below=8 if model.moe is not None else 0,
    )


def build_timing(
    model: ModelSpec | str,
    device: DeviceSpec | str,
    node: NodeSpec | str | None,
    tp: int,
    pp: int,
    cfg: PredictorConfig,
    *,
    block_size: int = 16,
    progress: bool = False,
) -> TimingModel:
    """Timing grids for model on device/node at TP x PP, from the cache or freshly built.

    Names are looked up in the catalogs (node None: the device's usual node). Loads the
    operator samples of cfg.source, then defers to timing_from_samples.
    """
    validate_predictor(cfg)
    spec = model if isinstance(model, ModelSpec) else get_model(model)
    spec.check_modelled()  # MLA is not timed yet
    spec.check_parallelism(tp, pp)
    dev = device if isinstance(device, DeviceSpec) else get_device(device)
    if node is None:
        node = default_node_for(dev.name)
    nd = node if isinstance(node, NodeSpec) else get_node(node)
    # A warm cache is found from the inputs alone, without loading the samples.
    fingerprint = input_fingerprint(spec, dev, nd, tp, pp, cfg, block_size)
    cached = _from_memo(fingerprint, spec, tp, pp, cfg)
    if cached is not None:
        return cached
    # Lazy: the sources package pulls in parquet/YAML readers this module does not need.
    from vidur_fast.timing.sources import load_samples

    samples = load_samples(
        cfg.source,
        spec,
        dev,
        nd,
        tp,
        pp,
        profile_dir=cfg.profile_dir,
        backend=cfg.backend,
        block_size=block_size,
        precision=cfg.precision,
        kv_cache_dtype=cfg.kv_cache_dtype,
        kernel_envelope=cfg.kernel_envelope,
        **_moe_args(spec, cfg),
        decode_attention_kv_dtype=cfg.decode_attention_kv_dtype,
        **({"allreduce_rms_fusion": True} if cfg.allreduce_rms_fusion else {}),
    )
    timing = timing_from_samples(samples, spec, tp, pp, cfg, progress=progress)
    if cfg.cache_mode in ("use", "refresh"):
        write_memo(resolve_cache_dir(cfg), fingerprint, timing.meta["key"])
    return timing


def _moe_args(model: ModelSpec, cfg: PredictorConfig) -> dict:
    """The MoE settings a source needs (none for a dense model, so its inputs are unchanged)."""
    if model.moe is None:
        return {}
    out = dict(moe_ep=cfg.moe_ep, attention_dp=cfg.attention_dp, moe_routing=cfg.moe_routing)
    if cfg.moe_kernel and cfg.source == "aiconfigurator":
        out["moe_kernel"] = cfg.moe_kernel
    return out


def _from_memo(
    fingerprint: str, model: ModelSpec, tp: int, pp: int, cfg: PredictorConfig
) -> TimingModel | None:
    if cfg.cache_mode not in ("use", "require"):
        return None
    cache_dir = resolve_cache_dir(cfg)
    key = read_memo(cache_dir, fingerprint)
    if key is None:
        return None
    try:
        arrays, record = load_entry(cache_dir, key)
    except CacheMiss:
        return None
    meta = {**record, "from_cache": True, "cache_path": str(entry_paths(cache_dir, key)[0])}
    return TimingModel(make_grids(**arrays), timing_params(model, tp, pp, cfg), meta)


def timing_from_samples(
    samples: OperatorSamples,
    model: ModelSpec,
    tp: int,
    pp: int,
    cfg: PredictorConfig,
    *,
    progress: bool = False,
) -> TimingModel:
    """Timing grids for already-loaded samples, honouring cfg.cache_mode."""
    validate_predictor(cfg)
    params = timing_params(model, tp, pp, cfg)
    key = cache_key(samples, cfg, model=model.name, tp=tp, pp=pp)
    cache_dir = resolve_cache_dir(cfg)
    npz_path = entry_paths(cache_dir, key)[0]
    miss = f"cache not read (cache_mode={cfg.cache_mode})"
    if cfg.cache_mode in ("use", "require"):
        try:
            arrays, record = load_entry(cache_dir, key)
            meta = {**record, "from_cache": True, "cache_path": str(npz_path)}
            return TimingModel(make_grids(**arrays), params, meta)
        except CacheMiss as exc:
            if cfg.cache_mode == "require":
                raise ProfileError(f"predictor.cache_mode: 'require' but {exc}") from None
            if isinstance(exc, CacheCorrupt):
                print(f"notice: timing grid cache: {exc}; rebuilding", file=sys.stderr)
            miss = str(exc)

    grids, fit_stats, build_s = _build(samples, cfg, tp, pp, progress)
    meta = {
        "key": key,
        "source": samples.source,
        "provenance": samples.provenance,
        "model": model.name,
        "tp": tp,
        "pp": pp,
        "settings": value_settings(cfg),
        "fit": fit_stats,
        "build_s": round(build_s, 3),
        "versions": {p: _version(p) for p in ("numpy", "scikit-learn", "vidur-fast")},
    }
    if cfg.cache_mode in ("use", "refresh"):
        try:
            save_entry(cache_dir, key, {k: getattr(grids, k) for k in GRID_FIELDS}, meta)
        except OSError as exc:  # an unwritable cache must not stop a run
            warnings.warn(f"grid cache not written to {cache_dir}: {exc}", stacklevel=2)
    meta.update(from_cache=False, cache_path=str(npz_path), cache_miss=miss)
    return TimingModel(grids, params, meta)


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:  # running from a source tree without an install
        return "unknown"


def _build(samples: OperatorSamples, cfg: PredictorConfig, tp: int, pp: int, progress: bool):
    from tqdm import tqdm  # only when grids are built (not on a cache hit)

    t0 = time.perf_counter()
    total = len(op_tables(samples)) + _GRID_STAGES
    # no bar when stderr is not a terminal (logs get no carriage-return clutter)
    with tqdm(
        total=total, disable=None if progress else True, file=sys.stderr, desc="timing"
    ) as bar:

        def step(stage: str) -> None:
            bar.set_postfix_str(stage)
            bar.update()

        models = fit_all(samples, cfg, step=step)
        weights = samples.provenance.get("layer_weights")
        grids = build_grids(models, cfg, tp, pp, step=step, weights=weights)
        if progress and bar.disable:  # stderr is not a terminal: one line instead of a bar
            print(
                f"timing: {len(models)} operator models fitted and grids built in "
                f"{time.perf_counter() - t0:.1f} s (cached for later runs)",
                file=sys.stderr,
            )
    return grids, {name: m.stats for name, m in models.items()}, time.perf_counter() - t0


def held_out_accuracy(samples: OperatorSamples, cfg: PredictorConfig) -> pd.DataFrame:
    """Per-operator MAPE (%) on a deterministic 20% hold-out (seeded by cfg.random_state).

    Predictions go through the same support/extrapolation rule as the grids.
    """
    import pandas as pd

    validate_predictor(cfg)
    rows = []
    for name, (kind, X, y) in op_tables(samples).items():
        X, y, _ = clean_rows(name, X, y)
        if len(y) < 5:
            continue
        perm = np.random.default_rng(cfg.random_state).permutation(len(y))
        n_test = max(1, round(0.2 * len(y)))
        test, train = perm[:n_test], perm[n_test:]
        m = fit_op(name, kind, X[train], y[train], cfg)
        pred = evaluate_points(m, X[test])
        ape = np.abs(pred - y[test]) / np.where(y[test] > 0, y[test], np.inf)
        rows.append(
            {
                "op": name,
                "kind": kind,
                "n_train": len(train),
                "n_test": n_test,
                "mape_pct": mape(y[test], pred),
                "p95_ape_pct": float(100 * np.quantile(ape, 0.95)),
                "regressor": cfg.regressor,
            }
        )
    return pd.DataFrame(rows)
