"""`vidur-fast validate --silicon-sample`: simulate rows of aiconfigurator's silicon corpus.

Each selected row becomes a closed-loop validation row (`vidur_fast.validation.run`), simulated with
the same settings as any benchmark CSV; the report groups the rows by (model, system,
precision) and adds a physics check of what each row's measured throughput implies.
"""

import math
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from vidur_fast.errors import ConfigError, UserError
from vidur_fast.validation.bench_csv import BenchRow
from vidur_fast.validation.run import (
    ValidateConfig,
    aggregate,
    pd_engine_settings,
    resolve_device,
    row_config,
)
from vidur_fast.validation.silicon.campaigns import (
    HOPPER_DEVICES,
    Campaign,
    campaign_for,
    client_lengths,
)
from vidur_fast.validation.silicon.moe_campaigns import moe_campaign_for
from vidur_fast.validation.silicon.physics import check_moe_row, check_row
from vidur_fast.validation.silicon.sample import SiliconRow, is_moe, read_silicon_sample

# GEMM precisions the timing tables are fitted for (PredictorConfig.precision)
MODELLED_PRECISIONS = ("bf16", "fp8", "fp8_block", "nvfp4")


@dataclass(frozen=True)
class SiliconValidateConfig:
    """Simulate rows of aiconfigurator's silicon corpus and report the errors per group."""

    silicon_sample: bool = True
    """Read the corpus shipped in the installed aiconfigurator-core package."""
    file: str | None = None
    """A CSV with the corpus's own 34 columns instead of the installed one."""
    backend: str = "vllm"
    """Only rows of this backend ('all' = every backend; the others are listed as not
    modelled)."""
    mode: str = "all"
    """Only rows of this mode (agg, disagg; 'all' = both)."""
    model: tuple[str, ...] = ()
    """Only rows whose model_path contains one of these (case-insensitive)."""
    system: tuple[str, ...] = ()
    """Only rows of these systems (aiconfigurator names like h200_sxm or catalog names)."""
    max_rows_per_group: int = 0
    """Simulate at most this many rows of each (model, system, precision, mode) group, spread
    over the group (0 = all)."""
    out: str | None = None
    """Write the per-row results (with the physics columns) as CSV here."""
    campaign_facts: bool = True
    """Simulate each row with what its campaign's published benchmark scripts state (KV-cache
    dtype, the client's length distribution and request count; docs/validation.md). False:
    the validator's defaults for every row."""
    prompt_pool: int = 0
    """What-if for a client that reuses a pool of this many prompts (aiperf's default dataset:
    100), with the engine's prefix caching: applied to every selected row (0 = off)."""
    sim: ValidateConfig = field(default_factory=lambda: ValidateConfig(csv=""))
    """Simulation settings, as for `vidur-fast validate FILE.csv` (csv is ignored)."""
    quiet: bool = False
    """Print only the group table and the aggregate."""


def _system_matches(system: str, wanted: tuple[str, ...]) -> bool:
    if not wanted:
        return True
    names = {system.lower()}
    try:
        names.add(resolve_device(system))
    except UserError:
        pass
    return any(w.lower() in names for w in wanted)


def select_rows(rows: list[SiliconRow], cfg: SiliconValidateConfig) -> list[SiliconRow]:
    out = []
    for r in rows:
        b = r.bench
        if cfg.backend != "all" and b.backend != cfg.backend.lower():
            continue
        if cfg.mode != "all" and b.mode != cfg.mode.lower():
            continue
        if cfg.model and not any(m.lower() in b.model.lower() for m in cfg.model):
            continue
        if not _system_matches(b.device, cfg.system):
            continue
        out.append(r)
    if cfg.max_rows_per_group > 0:
        groups: dict[tuple, list[SiliconRow]] = {}
        for r in out:
            groups.setdefault((*group_key(r), r.bench.mode), []).append(r)
        keep = set()
        for g in groups.values():
            n = len(g)
            idx = np.unique(np.linspace(0, n - 1, min(n, cfg.max_rows_per_group)).round())
            keep.update(g[int(i)].bench.index for i in idx)
        out = [r for r in out if r.bench.index in keep]
    return out


def group_key(r: SiliconRow) -> tuple[str, str, str]:
    return (r.bench.model, r.bench.device, r.precision)


def _prefilter(r: SiliconRow, skipped: str) -> str:
    """Why row r is not simulated before trying (skipped: its reason from reading, or "")."""
    if skipped:
        return skipped
    if is_moe(r.bench.model):  # simulated in the checkpoint's formats (sample.moe_row_settings)
        return ""
    if r.precision not in MODELLED_PRECISIONS:
        return (
            f"precision {r.precision}: not in the timing model (modelled: "
            f"{', '.join(MODELLED_PRECISIONS)})"
        )
    return ""


def simulate_silicon(cfg: SiliconValidateConfig, progress=None) -> pd.DataFrame:
    """One record per selected row: measured, simulated, errors, physics check, skip reason."""
    if cfg.max_rows_per_group < 0:
        raise ConfigError(f"max_rows_per_group: must be >= 0 (got {cfg.max_rows_per_group})")
    if cfg.prompt_pool < 0:
        raise ConfigError(f"prompt_pool: must be >= 0 (got {cfg.prompt_pool})")
    rows = select_rows(read_silicon_sample(cfg.file), cfg)
    if not rows:
        raise ConfigError(
            "silicon sample: no row matches the filters (backend, mode, model, system)"
        )
    sim_cfg = replace(cfg.sim, csv=cfg.file or "silicon_sample.csv")
    with tempfile.TemporaryDirectory(prefix="vidur-fast-silicon-") as tmp:
        return pd.DataFrame(_simulate_rows(rows, cfg, sim_cfg, Path(tmp), progress))


def _simulate(
    b: BenchRow, sim_cfg: ValidateConfig, camp: Campaign | None, tmp: Path, prompt_pool: int = 0
) -> tuple[str, float, float, tuple[str, ...]]:
    """(skip reason, simulated mean TTFT ms, mean TPOT ms, scheduler settings turned off for
    the prefill/decode flow) of one row, with the campaign's stated settings when `camp` is
    given."""
    from vidur_fast.api import simulate
    from vidur_fast.config.workload import TraceLengths

    try:
        if camp is not None and camp.requests_per_client:
            b = replace(b, num_requests=camp.requests_per_client * b.concurrency)
        if camp is not None and getattr(camp, "expert_parallel", False):
            b = replace(b, moe_ep=b.tp * b.attention_dp)
        if camp is not None and camp.gpu_memory_utilization:
            margin = round(1.0 - camp.gpu_memory_utilization, 9)
            sim_cfg = replace(sim_cfg, memory_margin_fraction=margin)
        cfg = row_config(b, sim_cfg)
        if camp is not None and camp.kv_cache_dtype:
            cfg = replace(cfg, predictor=replace(cfg.predictor, kv_cache_dtype=camp.kv_cache_dtype))
        if camp is not None and getattr(camp, "moe_kernel", ""):
            cfg = replace(cfg, predictor=replace(cfg.predictor, moe_kernel=camp.moe_kernel))
        if camp is not None and (
            getattr(camp, "allreduce_rms_fusion", False)
            or resolve_device(b.device) in camp.allreduce_rms_fusion_devices
        ):
            cfg = replace(cfg, predictor=replace(cfg.predictor, allreduce_rms_fusion=True))
        if camp is not None and camp.async_scheduling is not None:
            sched = replace(cfg.scheduler, async_scheduling=camp.async_scheduling)
            cfg = replace(cfg, scheduler=sched)
        if camp is not None and camp.greedy:
            argmax = replace(cfg.predictor, sampler_ms=0.0, sampler_per_seq_ms=0.0)
            cfg = replace(cfg, predictor=argmax)
        if camp is not None and camp.hopper_decode_attention_kv_dtype:
            if resolve_device(b.device) in HOPPER_DEVICES:
                dec_kv = camp.hopper_decode_attention_kv_dtype
                cfg = replace(
                    cfg, predictor=replace(cfg.predictor, decode_attention_kv_dtype=dec_kv)
                )
        if camp is not None and camp.mixed_graph_tokens_per_client:
            device = resolve_device(b.device)
            limit = min(camp.mixed_graph_tokens_per_client * b.concurrency, 512)
            if device in camp.no_mixed_graph_devices:
                limit = 0
            cfg = replace(cfg, predictor=replace(cfg.predictor, graph_max_tokens=limit))
        if camp is not None and getattr(camp, "graph_capture_max_tokens", 0):
            limit = camp.graph_capture_max_tokens
            cfg = replace(cfg, predictor=replace(cfg.predictor, graph_max_tokens=limit))
        if camp is not None and camp.length_range_ratio < 1.0:
            n = cfg.workload.num_requests
            p, d = client_lengths(b.isl, b.osl, n, camp.length_range_ratio, sim_cfg.seed + b.index)
            path = tmp / f"lengths_{b.index}.csv"
            pd.DataFrame({"num_prefill_tokens": p, "num_decode_tokens": d}).to_csv(
                path, index=False
            )
            lengths = TraceLengths(path=str(path), shuffle=False)
            cfg = replace(cfg, workload=replace(cfg.workload, lengths=lengths))
        if prompt_pool:
            cfg = replace(cfg, workload=replace(cfg.workload, prompt_pool=prompt_pool))
        off: tuple[str, ...] = ()
        if b.pd is not None:
            cfg, off = pd_engine_settings(cfg)
        res = simulate(cfg)
    except UserError as exc:
        return str(exc).splitlines()[0], math.nan, math.nan, ()
    # the client's view, as the run's metrics define it (for PD too)
    cl = res.summary["closed_loop"]
    if cl["ttft"].get("count", 0) == 0:
        return "no request completed in the measurement window", math.nan, math.nan, off
    tpot = cl["tpot"].get("mean", math.nan) if cl["tpot"].get("count", 0) else math.nan
    return "", 1e3 * cl["ttft"]["mean"], 1e3 * tpot, off


def _simulate_rows(rows, cfg: SiliconValidateConfig, sim_cfg: ValidateConfig, tmp: Path, progress):
    recs = []
    for r in rows:
        b = r.bench
        camp = campaign_for(r) or moe_campaign_for(r)
        skipped = r.skipped
        by_label = bool(r.label_conflict) and skipped == r.label_conflict
        if by_label and cfg.campaign_facts and getattr(camp, "layout_from_id", False):
            skipped = ""  # the campaign ran the layout the id states, which b holds
        reason = _prefilter(r, skipped)
        sim_ttft = sim_tpot = math.nan
        off: tuple[str, ...] = ()
        if not reason and camp is not None and camp.held_out and cfg.campaign_facts:
            if not cfg.prompt_pool:
                reason = f"held out: {camp.held_out}"
        if not reason:
            reason, sim_ttft, sim_tpot, off = _simulate(
                b, sim_cfg, camp if cfg.campaign_facts else None, tmp, cfg.prompt_pool
            )
        phys = None
        # the check counts dense layers on one replica (not a prefill/decode split); MoE rows
        # get its decode side, with the experts the step's tokens reach
        if not skipped and b.pd is None:
            try:
                device = resolve_device(b.device)
            except UserError:
                device = ""
            if device and is_moe(b.model):
                phys = check_moe_row(b.model, device, b.precision, b.tp, b.attention_dp,
                                     b.concurrency, b.tpot_ms)  # fmt: skip
            elif device:
                phys = check_row(b.model, device, r.precision, b.tp, b.pp, b.concurrency,
                                 b.isl, b.osl, b.ttft_ms, b.tpot_ms)  # fmt: skip
        rec = {
            "row": b.index,
            "id": b.id,
            "model": b.model,
            "system": b.device,
            "precision": r.precision,
            "mode": b.mode,
            "layout": b.pd.label() if b.pd is not None else "",
            "pd_settings_off": ",".join(off),
            "campaign": r.campaign,
            "campaign_facts": camp.name if (camp and cfg.campaign_facts) else "",
            "measured": r.measured,
            "backend_version": b.backend_version,
            "tp": b.tp,
            "pp": b.pp,
            "concurrency": b.concurrency,
            "concurrency_recorded": r.concurrency_recorded,
            "isl": b.isl,
            "osl": b.osl,
            "measured_ttft_ms": b.ttft_ms,
            "sim_ttft_ms": sim_ttft,
            "ttft_err_pct": 100 * (sim_ttft - b.ttft_ms) / b.ttft_ms,
            "measured_tpot_ms": b.tpot_ms,
            "sim_tpot_ms": sim_tpot,
            "tpot_err_pct": 100 * (sim_tpot - b.tpot_ms) / b.tpot_ms,
            "prefill_tflops_per_gpu": phys.prefill_tflops_per_gpu if phys else math.nan,
            "prefill_util": phys.prefill_util if phys else math.nan,
            "gemm_util": phys.gemm_util if phys else math.nan,
            "tpot_floor_ms": phys.tpot_floor_ms if phys else math.nan,
            "physics": phys.flag if phys else "",
            "physics_note": phys.note if phys else "",
            "skipped": reason,
        }
        recs.append(rec)
        if progress is not None:
            progress(rec)
    return recs


def _stats(e: np.ndarray) -> tuple[float, float]:
    e = e[np.isfinite(e)]
    return (float(np.mean(np.abs(e))), float(np.mean(e))) if e.size else (math.nan, math.nan)


def group_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (model, system, precision): rows, simulated, TTFT/TPOT MAPE and bias, physics."""
    recs = []
    for (model, system, prec), g in df.groupby(["model", "system", "precision"], sort=False):
        ok = g[g["skipped"] == ""]
        tm, tb = _stats(ok["ttft_err_pct"].to_numpy(dtype=np.float64))
        pm, pb = _stats(ok["tpot_err_pct"].to_numpy(dtype=np.float64))
        gu = g["gemm_util"].to_numpy(dtype=np.float64)
        recs.append(
            {
                "model": model,
                "system": system,
                "precision": prec,
                "rows": len(g),
                "simulated": len(ok),
                "ttft_mape": tm,
                "ttft_bias": tb,
                "tpot_mape": pm,
                "tpot_bias": pb,
                "physics_flagged": int((g["physics"] != "").sum()),
                "max_gemm_util": float(np.nanmax(gu)) if np.isfinite(gu).any() else math.nan,
            }
        )
    return pd.DataFrame(recs)


def _pct(x: float, signed: bool = False) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:+.1f}" if signed else f"{x:.1f}"


def format_groups(df: pd.DataFrame, per_row: bool = False) -> str:
    lines = []
    if per_row:
        ok = df[df["skipped"] == ""]
        lines.append(
            f"{'row':>5} {'model':<34} {'system':<9} {'prec':<6} {'tp':>2} {'conc':>4} "
            f"{'isl':>5} {'osl':>5} {'ttft meas':>9} {'sim':>9} {'err%':>7} "
            f"{'tpot meas':>9} {'sim':>7} {'err%':>7} {'gemm':>5}"
        )
        for r in ok.itertuples(index=False):
            lines.append(
                f"{r.row:>5} {r.model[:34]:<34} {r.system[:9]:<9} {r.precision[:6]:<6} "
                f"{r.tp:>2} {r.concurrency:>4} {r.isl:>5} {r.osl:>5} "
                f"{r.measured_ttft_ms:>9.1f} {r.sim_ttft_ms:>9.1f} {r.ttft_err_pct:>+7.1f} "
                f"{r.measured_tpot_ms:>9.2f} {r.sim_tpot_ms:>7.2f} {r.tpot_err_pct:>+7.1f} "
                f"{r.gemm_util:>5.2f}"
            )
    for r in df[df["skipped"] != ""].itertuples(index=False):
        lines.append(f"not simulated: row {r.row} ({r.id}): {r.skipped}")
    for r in df[df["physics"] != ""].itertuples(index=False):
        lines.append(
            f"physics: row {r.row} ({r.model}, {r.system}, tp{r.tp}, c{r.concurrency}, "
            f"{r.isl}/{r.osl}): {r.physics}"
        )
    for r in df[df["physics_note"] != ""].itertuples(index=False):
        lines.append(
            f"note: row {r.row} ({r.model}, {r.system}, tp{r.tp}, c{r.concurrency}, "
            f"{r.isl}/{r.osl}): {r.physics_note}"
        )
    g = group_table(df)
    lines.append("")
    lines.append(
        f"{'model':<34} {'system':<9} {'prec':<9} {'rows':>4} {'sim':>4} "
        f"{'TTFT MAPE':>9} {'bias':>7} {'TPOT MAPE':>9} {'bias':>7} {'phys':>4} {'gemm':>5}"
    )
    for r in g.itertuples(index=False):
        lines.append(
            f"{r.model[:34]:<34} {r.system[:9]:<9} {r.precision[:9]:<9} {r.rows:>4} "
            f"{r.simulated:>4} {_pct(r.ttft_mape):>9} {_pct(r.ttft_bias, True):>7} "
            f"{_pct(r.tpot_mape):>9} {_pct(r.tpot_bias, True):>7} {r.physics_flagged:>4} "
            f"{(f'{r.max_gemm_util:.2f}' if math.isfinite(r.max_gemm_util) else '-'):>5}"
        )
    agg = aggregate(df)
    lines.append(
        f"rows {agg['rows']}: simulated {agg['simulated']}, not simulated {agg['skipped']}, "
        f"physics-flagged {int((df['physics'] != '').sum())}"
    )
    lines.extend(_aggregate_lines(agg))
    # the same over rows that are physically consistent and state their client concurrency
    sound = df[(df["physics"] == "") & df["concurrency_recorded"].astype(bool)]
    if len(sound) < len(df):
        a2 = aggregate(sound)
        lines.append(
            f"rows physically consistent, concurrency recorded: {a2['rows']} "
            f"(simulated {a2['simulated']})"
        )
        lines.extend("  " + ln for ln in _aggregate_lines(a2))
    lines.append(
        "gemm = largest fraction of each second the replica needs for the prefill GEMMs alone "
        "(measured GEMM tables, every prompt computed); phys = rows above the device"
    )
    return "\n".join(lines)


def _aggregate_lines(agg: dict) -> list[str]:
    out = []
    for m, label in (("ttft", "mean TTFT"), ("tpot", "mean TPOT")):
        a = agg[m]
        if a.get("count"):
            out.append(
                f"{label}: MAPE {a['mape_pct']:.1f}%  bias {a['bias_pct']:+.1f}%  "
                f"median APE {a['median_ape_pct']:.1f}%  max APE {a['max_ape_pct']:.1f}%"
            )
    return out


def format_disagg(df: pd.DataFrame) -> str:
    """The disaggregated rows: one line per simulated row (its prefill/decode layout, client
    count, measured and simulated mean TTFT / TPOT, errors), then the rows not simulated,
    counted per reason and system, then the aggregate."""
    lines = []
    ok = df[df["skipped"] == ""]
    if len(ok):
        lines.append(
            f"{'row':>5} {'model':<26} {'system':<9} {'layout':<24} {'conc':>4} {'isl':>5} "
            f"{'osl':>5} {'ttft meas':>9} {'sim':>8} {'err%':>7} {'tpot meas':>9} {'sim':>7} "
            f"{'err%':>7}"
        )
        for r in ok.itertuples(index=False):
            conc = f"{r.concurrency}{'' if r.concurrency_recorded else '*'}"
            lines.append(
                f"{r.row:>5} {r.model[:26]:<26} {r.system[:9]:<9} {r.layout[:24]:<24} "
                f"{conc:>4} {r.isl:>5} {r.osl:>5} {r.measured_ttft_ms:>9.1f} "
                f"{r.sim_ttft_ms:>8.1f} {r.ttft_err_pct:>+7.1f} {r.measured_tpot_ms:>9.2f} "
                f"{r.sim_tpot_ms:>7.2f} {r.tpot_err_pct:>+7.1f}"
            )
        if not ok["concurrency_recorded"].astype(bool).all():
            lines.append("* client count not recorded: decode_batch_size x decode workers")
        off = sorted({s for v in ok["pd_settings_off"] for s in str(v).split(",") if s})
        if off:
            lines.append(
                f"simulated with {' and '.join(off)} off (the prefill/decode flow refuses them)"
            )
    skipped = df[df["skipped"] != ""]
    for (reason, system), g in skipped.groupby(["skipped", "system"], sort=True):
        rows = g["row"].to_numpy()
        which = (
            f"row {rows[0]}" if len(rows) == 1 else f"{len(rows)} rows ({rows.min()}-{rows.max()})"
        )
        lines.append(f"not simulated: {which}, {system}: {reason}")
    agg = aggregate(df)
    lines.append(
        f"rows {agg['rows']}: simulated {agg['simulated']}, not simulated {agg['skipped']}"
    )
    lines.extend(_aggregate_lines(agg))
    return "\n".join(lines)


def format_silicon(df: pd.DataFrame, per_row: bool = False) -> str:
    """The report of `validate --silicon-sample`: the aggregated rows' groups, then the
    disaggregated rows (format_disagg), each where the selection has some."""
    parts = []
    agg = df[df["mode"] != "disagg"]
    dis = df[df["mode"] == "disagg"]
    if len(agg):
        parts.append(format_groups(agg, per_row=per_row))
    if len(dis):
        parts.append("Disaggregated rows (prefill and decode pools):\n" + format_disagg(dis))
    return "\n\n".join(parts)
