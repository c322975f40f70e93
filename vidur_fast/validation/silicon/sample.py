"""Rows of aiconfigurator's silicon corpus (`silicon_sample.csv`, 34 columns) as validation rows.

The corpus ships inside the installed `aiconfigurator_core` package; each row is one measured
serving benchmark (backend, model, system, parallelism, isl/osl, client concurrency, mean TTFT
and TPOT) with a free-text `silicon_data_source` naming the campaign it came from.
"""

import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from vidur_fast.catalog.names import stated_quantization
from vidur_fast.errors import ConfigError, TraceError
from vidur_fast.validation.bench_csv import BenchRow, PDLayout, PDStage

SAMPLE_PACKAGE = "aiconfigurator_core"
SAMPLE_RESOURCE = ("systems", "silicon_sample.csv")
REQUIRED_COLUMNS = (
    "id", "silicon_data_source", "backend", "backend_version", "model_path", "system",
    "precision", "mode", "isl", "osl", "gemm_quant_mode", "batch_size", "tp_size", "pp_size",
    "silicon_ttft_ms", "silicon_tpot_ms",
)  # fmt: skip
# Families whose checkpoints are mixture-of-experts (the simulator models dense layers only).
MOE_NAME = re.compile(
    r"deepseek-(v\d|r\d)|kimi-k\d|minimax-m\d|gpt-oss|mixtral|glm-[45]|-a\d+b\b|qwen3\.5-\d+b",
    re.IGNORECASE,
)
# the client count in a row's id (`..._1024x1024_c64_tp8_...`; `_c_` where none is recorded)
ID_CONCURRENCY = re.compile(r"_c(\d+)(?:_|$)")
# source keys that identify one measurement, not the campaign
PER_ROW_KEYS = ("config_id", "silicon_concurrency", "gtl_task_id", "workflow_run_id", "measured")


@dataclass(frozen=True)
class SiliconRow:
    bench: BenchRow
    precision: str
    """Weight/GEMM quantization of the row ("bf16" when the corpus leaves it empty)."""
    campaign: str
    """The measurement campaign (source file and container image, per-row ids removed)."""
    source: str
    """The row's silicon_data_source as written."""
    measured: str
    """Measurement date, when the source records one."""
    concurrency_recorded: bool
    """The source states the client concurrency (else batch_size stands in for it)."""
    skipped: str = ""
    """Why the row is not simulated before any simulation is tried ("" = try it)."""
    label_conflict: str = ""
    """The row's id states another GPU layout than its columns (the text says how); bench then
    holds the id's layout, and skipped is this text unless something else stops the row."""


def sample_path() -> Path:
    """The silicon corpus of the installed aiconfigurator-core package."""
    try:
        root = resources.files(SAMPLE_PACKAGE)
    except ModuleNotFoundError:
        raise ConfigError(
            f"silicon sample: package {SAMPLE_PACKAGE} is not installed (pip install "
            "aiconfigurator-core)"
        ) from None
    path = Path(str(root.joinpath(*SAMPLE_RESOURCE)))
    if not path.is_file():
        raise ConfigError(f"silicon sample: {SAMPLE_PACKAGE} has no {'/'.join(SAMPLE_RESOURCE)}")
    return path


def source_fields(source: str) -> dict[str, str]:
    """`key=value; key=value` pairs of a silicon_data_source (a bare item is kept as itself)."""
    out: dict[str, str] = {}
    for part in str(source).split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip()] = value.strip()
        elif "/" in part and ":" in part:
            out["image"] = part
        else:
            out[part] = ""
    return out


def campaign_of(source: str) -> str:
    """A campaign label: the source's fields without per-row ids, file names without folders."""
    parts = []
    for key, value in source_fields(source).items():
        if key in PER_ROW_KEYS:
            continue
        if key == "source_file":
            value = value.replace("\\", "/").rsplit("/", 2)
            value = "/".join(value[-2:]) if len(value) > 1 else value[0]
        parts.append(f"{key}={value}" if value else key)
    return "; ".join(parts)


def is_moe(model: str) -> bool:
    return bool(MOE_NAME.search(model))


def _str(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v).strip()


def _int(path: Path, i: int, col: str, v, low: int = 1) -> int | None:
    s = _str(v)
    if s == "":
        return None
    try:
        x = float(s)
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or x != int(x) or x < low:
        raise TraceError(
            f"{path}: row {i + 1}: column {col}: expected an integer >= {low}, got {s!r}"
        )
    return int(x)


def _ms(path: Path, i: int, col: str, v) -> float:
    try:
        x = float(_str(v))
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or x <= 0:
        raise TraceError(f"{path}: row {i + 1}: column {col}: expected a number > 0, got {v!r}")
    return x


def moe_row_settings(path: Path, i: int, rec: dict, model: str, tp: int):
    """(attention_dp, moe_ep, GEMM precision, skip reason, label conflict) of a MoE row; the
    skip reason says why the row cannot be simulated at all.

    The corpus states moe_tp_size and moe_ep_size and, on most campaigns, attention_dp_size;
    where that is empty the DP degree is the one the expert split implies (vLLM splits the
    experts over all tp x dp GPUs: moe_tp x moe_ep = tp x dp). The GEMM precision of the
    attention and dense layers is the checkpoint's (gpt-oss keeps attention in bf16 although
    the corpus labels its rows nvfp4); the experts run in the checkpoint's expert format.
    When the row's id (the sweep's own label, tp{N}_ep{M}) states another layout than its
    columns, the settings are the id's (N GPUs, experts over M of them, no attention DP) and
    the label conflict says so: the row is then skipped unless its campaign states that the
    id's layout is what ran (MoECampaign.layout_from_id)."""
    from vidur_fast.catalog import get_model
    from vidur_fast.errors import UserError

    dp = _int(path, i, "attention_dp_size", rec.get("attention_dp_size"))
    mtp = _int(path, i, "moe_tp_size", rec.get("moe_tp_size"))
    mep = _int(path, i, "moe_ep_size", rec.get("moe_ep_size")) or 1
    if dp is None:
        dp = (mtp or tp) * mep // tp if ((mtp or tp) * mep) % tp == 0 else 1
    stated = re.search(r"_tp(\d+)(?:_0)?_ep(\d+)(?:_0)?_", _str(rec.get("id")))
    conflict = ""
    if stated and (int(stated.group(1)), int(stated.group(2))) != (tp, mep):
        # InferenceX rows filed with attention DP: the id (the sweep's own label) states
        # tp{N}_ep{M} on N GPUs while the columns state tp x dp = 16 GPUs; their
        # measurements repeat the same sweep's rows filed without DP
        conflict = (
            f"the id states tp{stated.group(1)} ep{stated.group(2)}, the columns tp_size {tp} "
            f"x attention_dp_size {dp} with moe_ep_size {mep}: the GPU count is not recorded "
            "consistently"
        )
        if int(stated.group(1)) != tp:  # the id's layout cannot be taken either
            return dp, mep, "", conflict, ""
        dp, mep, mtp = 1, int(stated.group(2)), None
    if mtp is not None and mtp * mep != tp * dp:
        why = (
            f"moe_tp_size x moe_ep_size = {mtp} x {mep} is not tp_size x attention_dp_size "
            f"= {tp} x {dp}"
        )
        return dp, mep, "", why, conflict
    try:
        spec = get_model(model)
    except UserError as exc:
        return dp, mep, "", str(exc).splitlines()[0], conflict
    if spec.quantization and "attention" in spec.quantized_groups:
        prec = spec.quantization
    elif spec.quantization:
        prec = ""  # only the experts (and MLPs) are quantized: attention stays bf16
    else:
        prec = stated_quantization(model) or ""
    return dp, mep, prec, "", conflict


def _unstated_moe_ep(model: str, gpus: int) -> int:
    """moe_ep of a side whose MoE columns are empty: 1 (vLLM's default, every expert split over
    the GPUs), or every GPU when vLLM would refuse that split for the checkpoint's experts
    (block-FP8 experts cut inside a block), so the side must have run expert-parallel."""
    from vidur_fast.catalog import get_model
    from vidur_fast.catalog.arch import expert_format, moe_parallel

    spec = get_model(model)
    try:
        moe_parallel(spec, gpus, 1, 1, expert_format(spec, stated_quantization(model) or ""))
    except ConfigError:
        return gpus
    return 1


def pd_row_layout(
    path: Path, i: int, rec: dict, moe: bool, model: str
) -> tuple[PDLayout | None, str]:
    """(prefill/decode layout, skip reason) of a disaggregated row.

    Each side states its workers, TP, PP, attention DP, MoE TP x EP and batch size
    (`prefill_*`, `decode_*`). A moe_tp_size / moe_ep_size of 0 or empty is not stated: vLLM
    without --enable-expert-parallel splits every expert over the tp x dp GPUs (moe_ep 1),
    unless that split is one vLLM refuses (block-FP8 experts cut inside a 128-column block),
    in which case the side ran expert-parallel (moe_ep = tp x dp)."""
    sides = []
    for side in ("prefill", "decode"):

        def get(col: str, low: int = 1, side=side):
            return _int(path, i, f"{side}_{col}", rec.get(f"{side}_{col}"), low)

        workers, tp = get("num_workers"), get("tp_size")
        if workers is None or tp is None:
            return None, f"{side}_num_workers/{side}_tp_size empty"
        dp = get("attention_dp_size") or 1
        mtp, mep = get("moe_tp_size", 0) or 0, get("moe_ep_size", 0) or 0
        if moe and mtp and mep and mtp * mep != tp * dp:
            why = (
                f"{side}_moe_tp_size x {side}_moe_ep_size = {mtp} x {mep} is not "
                f"{side}_tp_size x {side}_attention_dp_size = {tp} x {dp}"
            )
            return None, why
        sides.append(
            PDStage(
                workers=workers,
                tp=tp,
                pp=get("pp_size") or 1,
                attention_dp=dp if moe else 1,
                moe_ep=(mep or _unstated_moe_ep(model, tp * dp)) if moe else 1,
                batch_size=get("batch_size") or 0,
            )
        )
    return PDLayout(*sides), ""


def read_silicon_sample(path: str | Path | None = None) -> list[SiliconRow]:
    """Every row of a silicon corpus file (default: the installed package's)."""
    path = Path(path) if path is not None else sample_path()
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise TraceError(f"{path}: cannot read as CSV: {str(exc).splitlines()[0]}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise TraceError(f"{path}: missing silicon-sample column(s): {', '.join(missing)}")
    if df.empty:
        raise TraceError(f"{path}: no data rows")
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        src = source_fields(rec["silicon_data_source"])
        model = _str(rec["model_path"])
        mode = _str(rec["mode"]).lower()
        backend = _str(rec["backend"]).lower()
        tp = _int(path, i, "tp_size", rec["tp_size"])
        pp = _int(path, i, "pp_size", rec["pp_size"])
        batch = _int(path, i, "batch_size", rec["batch_size"])
        conc = _int(path, i, "silicon_data_source", src.get("silicon_concurrency"))
        if conc is None:  # the id's `_c<N>_` field (it agrees with the source wherever both do)
            stated_c = ID_CONCURRENCY.search(_str(rec["id"]))
            conc = int(stated_c.group(1)) if stated_c and int(stated_c.group(1)) > 0 else None
        precision = (
            _str(rec["gemm_quant_mode"]) or _str(rec["precision"]) or stated_quantization(model)
        ).lower() or "bf16"
        skipped = label_conflict = ""
        dp, ep, sim_precision = 1, 1, "" if precision == "bf16" else precision
        if is_moe(model):
            dp, ep, sim_precision, skipped, label_conflict = moe_row_settings(
                path, i, rec, model, tp or 1
            )
            skipped = skipped or label_conflict
        pd_layout = None
        if mode == "disagg":
            pd_layout, why = pd_row_layout(path, i, rec, is_moe(model), model)
            skipped = skipped or why
            if pd_layout is not None:
                # the decode side's stated batch per worker (per attention-DP rank) stands in
                # for the client count where the source records none (aiconfigurator's own
                # convention: concurrency = batch x attention DP, per worker)
                d = pd_layout.decode
                batch = d.batch_size * d.attention_dp * d.workers or None
                tp, pp = d.tp, d.pp
                dp, ep = d.attention_dp, d.moe_ep
        if mode not in ("agg", "disagg"):
            skipped = f"mode {mode or '(empty)'}: only agg and disagg serving are modelled"
        elif backend != "vllm":
            skipped = f"backend {backend}: only vllm is modelled (vLLM v1 scheduler and kernels)"
        elif skipped:
            pass
        elif tp is None or (conc or batch) is None:
            skipped = "tp_size/batch_size empty"
        bench = BenchRow(
            index=i,
            id=_str(rec["id"]) or f"row{i + 1}",
            model=model,
            device=_str(rec["system"]),
            tp=tp or 1,
            pp=pp or 1,
            concurrency=conc or batch or 1,
            isl=_int(path, i, "isl", rec["isl"]) or 1,
            osl=_int(path, i, "osl", rec["osl"]) or 1,
            precision=sim_precision,
            kv_cache_dtype="",
            backend=backend,
            backend_version=_str(rec["backend_version"]),
            mode=mode,
            num_requests=0,
            ttft_ms=_ms(path, i, "silicon_ttft_ms", rec["silicon_ttft_ms"]),
            tpot_ms=_ms(path, i, "silicon_tpot_ms", rec["silicon_tpot_ms"]),
            attention_dp=dp,
            moe_ep=ep,
            pd=pd_layout,
        )
        rows.append(
            SiliconRow(
                bench=bench,
                precision=precision,
                campaign=campaign_of(rec["silicon_data_source"]),
                source=str(rec["silicon_data_source"]),
                measured=src.get("measured", "")[:10],
                concurrency_recorded=conc is not None,
                skipped=skipped,
                label_conflict=label_conflict,
            )
        )
    return rows


def is_silicon_sample(path: str | Path) -> bool:
    """Whether a CSV file has the silicon corpus's own columns (its header names them)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            header = fh.readline()
    except OSError:
        return False
    cols = {c.strip() for c in header.split(",")}
    return "silicon_data_source" in cols and "silicon_ttft_ms" in cols
