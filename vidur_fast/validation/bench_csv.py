"""Read a CSV of measured serving benchmarks into validation rows (column aliases, checks)."""

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vidur_fast.errors import TraceError

# canonical field -> accepted column names (first match wins)
ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id", "name"),
    "model": ("model", "model_path", "model_name"),
    "device": ("device", "system", "gpu"),
    "tp": ("tp", "tp_size", "tensor_parallel_size"),
    "pp": ("pp", "pp_size", "pipeline_parallel_size"),
    "concurrency": ("concurrency", "batch_size", "max_concurrency"),
    "isl": ("isl", "input_len", "input_tokens"),
    "osl": ("osl", "output_len", "output_tokens"),
    "precision": ("precision", "gemm_dtype"),
    "kv_cache_dtype": ("kv_cache_dtype",),
    "backend": ("backend",),
    "backend_version": ("backend_version",),
    "mode": ("mode",),
    "num_requests": ("num_requests", "num_prompts"),
    "ttft_ms": ("ttft_ms", "mean_ttft_ms", "silicon_ttft_ms"),
    "tpot_ms": ("tpot_ms", "mean_tpot_ms", "silicon_tpot_ms"),
}
REQUIRED = ("model", "device", "tp", "concurrency", "isl", "osl", "ttft_ms", "tpot_ms")
# integer field -> smallest allowed value
INT_FIELDS = {"tp": 1, "pp": 1, "concurrency": 1, "isl": 1, "osl": 1, "num_requests": 0}
FLOAT_FIELDS = ("ttft_ms", "tpot_ms")


@dataclass(frozen=True)
class PDStage:
    """One side of a disaggregated deployment: its workers and each worker's layout."""

    workers: int
    tp: int
    pp: int = 1
    attention_dp: int = 1
    """Attention data-parallel ranks of each worker (MoE models; each of tp GPUs)."""
    moe_ep: int = 1
    """Expert-parallel ranks of each worker's MoE layers (MoE models)."""
    batch_size: int = 0
    """Sequences per step the corpus states for each worker (per attention-DP rank)."""


@dataclass(frozen=True)
class PDLayout:
    """A disaggregated deployment: prefill workers and decode workers (mode disagg)."""

    prefill: PDStage
    decode: PDStage

    def label(self) -> str:
        """`1P tp1 dp4 + 3D tp4`: workers, TP (PP, attention DP where > 1) of each side."""

        def side(s: PDStage, letter: str) -> str:
            out = f"{s.workers}{letter} tp{s.tp}"
            if s.pp > 1:
                out += f" pp{s.pp}"
            if s.attention_dp > 1:
                out += f" dp{s.attention_dp}"
            if s.moe_ep > 1:
                out += f" ep{s.moe_ep}"
            return out

        return f"{side(self.prefill, 'P')} + {side(self.decode, 'D')}"


@dataclass(frozen=True)
class BenchRow:
    """One measured benchmark: a closed loop of `concurrency` clients on one replica."""

    index: int  # 0-based data row
    id: str
    model: str
    device: str
    tp: int
    pp: int
    concurrency: int
    isl: int
    osl: int
    precision: str  # "" = the model's dtype
    kv_cache_dtype: str  # "" = the model's dtype
    backend: str
    backend_version: str
    mode: str
    num_requests: int  # 0 = the validator's default
    ttft_ms: float
    tpot_ms: float
    attention_dp: int = 1
    """Attention data-parallel ranks (MoE models; each of tp GPUs)."""
    moe_ep: int = 1
    """Expert-parallel ranks of the MoE layers (MoE models)."""
    pd: PDLayout | None = None
    """Prefill and decode workers of a disaggregated row (None: one aggregated replica)."""


def _column_map(path: Path, columns: list[str]) -> dict[str, str]:
    known = {alias: field for field, names in ALIASES.items() for alias in names}
    mapping: dict[str, str] = {}
    for col in columns:
        field = known.get(col.strip().lower())
        if field is None:
            accepted = ", ".join(n for names in ALIASES.values() for n in names)
            raise TraceError(f"{path}: unknown column {col!r}; accepted columns: {accepted}")
        if field in mapping:
            raise TraceError(
                f"{path}: columns {mapping[field]!r} and {col!r} both give {field}; keep one"
            )
        mapping[field] = col
    missing = [f for f in REQUIRED if f not in mapping]
    if missing:
        need = "; ".join(f"{f} ({' or '.join(ALIASES[f])})" for f in missing)
        raise TraceError(f"{path}: missing required column(s): {need}")
    return mapping


def _cell(path: Path, i: int, col: str, value, kind: type, low: int = 0):
    if kind is str:
        return (
            ""
            if value is None or (isinstance(value, float) and math.isnan(value))
            else (str(value).strip())
        )
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if kind is int:
        if not math.isfinite(x) or x != int(x) or x < low:
            raise TraceError(
                f"{path}: row {i + 1}: column {col}: expected an integer >= {low}, got {value!r}"
            )
        return int(x)
    if not math.isfinite(x) or x <= 0:
        raise TraceError(f"{path}: row {i + 1}: column {col}: expected a number > 0, got {value!r}")
    return x


def read_bench_csv(path: str | Path) -> list[BenchRow]:
    """Rows of a benchmark CSV (see docs/validation.md); TraceError names the first bad cell."""
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise TraceError(f"{path}: cannot read as CSV: {str(exc).splitlines()[0]}") from None
    if df.empty:
        raise TraceError(f"{path}: no data rows")
    cmap = _column_map(path, list(df.columns))
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        vals = {}
        for field in ALIASES:
            col = cmap.get(field)
            raw = rec.get(col, "") if col else ""
            if field in INT_FIELDS:
                default = {"pp": 1, "num_requests": 0}.get(field)
                vals[field] = (
                    default
                    if (raw == "" and default is not None)
                    else _cell(path, i, col or field, raw, int, INT_FIELDS[field])
                )
            elif field in FLOAT_FIELDS:
                vals[field] = _cell(path, i, col, raw, float)
            else:
                vals[field] = _cell(path, i, col or field, raw, str)
        vals["id"] = vals["id"] or f"row{i + 1}"
        rows.append(BenchRow(index=i, **vals))
    return rows
