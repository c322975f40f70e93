"""Operator samples from a directory in Vidur's data/profiling layout.

    compute/{device}/{hf model name}/mlp.csv, attention.csv
    network/{node name}/all_reduce.csv, send_recv.csv

Rows are filtered exactly as Vidur filters its training frames (duplicate rows dropped over
the whole file, the rest kept in file order) and the `.median` columns are used, with missing
medians read as 0 ms. vocab_size is deliberately NOT a filter: it does not
change any per-layer operator, and filtering on it only makes a model with a resized vocabulary
lose its (identical) profile.
"""

import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from vidur_fast.catalog import DeviceSpec, ModelSpec, NodeSpec
from vidur_fast.timing.samples import OperatorSamples
from vidur_fast.timing.sources._common import (
    BF16_BYTES,
    COMM_COLUMNS,
    DECODE_COLUMNS,
    KV_BYTES,
    PREFILL_COLUMNS,
    empty_frame,
    file_digest,
    frame,
    join,
    profile_error,
    token_ops_frame,
)

SOURCE = "vidur"

# mlp.csv ops, in Vidur's names; post_attention_layernorm is dropped for models without it.
MLP_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
MLP_FILTERS = (
    "n_head",
    "n_kv_head",
    "n_embd",
    "n_expanded_embd",
    "use_gated_mlp",
    "num_tensor_parallel_workers",
)
ATTN_FILTERS = ("n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers")
ATTN_SHAPE = ("batch_size", "prefill_chunk_size", "kv_cache_size")
KV_SAVE = "time_stats.attn_kv_cache_save.median"  # absent in FlashAttention-era files -> 0 ms
NET_COLUMNS = ("size", "collective", "num_workers", "devices_per_node")


def _median(op: str) -> str:
    return f"time_stats.{op}.median"


# ---- reading ----


@lru_cache(maxsize=32)
def _read_cached(path: str, mtime_ns: int, size: int, columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.read_csv(path, usecols=list(columns))


def _read(
    path: Path, root: Path, required: tuple[str, ...], optional=(), everything: bool = False
) -> pd.DataFrame:
    """Read the named columns of one CSV (all columns if `everything`); ProfileError naming the
    file (and column) if unusable."""
    rel = path.relative_to(root) if path.is_relative_to(root) else path
    if not path.is_file():
        raise profile_error(SOURCE, f"missing file {rel} in {root}")
    try:
        header = pd.read_csv(path, nrows=0).columns
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise profile_error(SOURCE, f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise profile_error(SOURCE, f"{path} lacks column {missing[0]!r}")
    if everything:
        cols = tuple(header)
    else:
        cols = tuple(required) + tuple(c for c in optional if c in header)
    st = os.stat(path)
    try:
        df = _read_cached(str(path), st.st_mtime_ns, st.st_size, cols)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise profile_error(SOURCE, f"cannot parse {path}: {str(exc).splitlines()[0]}") from None
    return df.copy()


def _numeric(df: pd.DataFrame, path: Path, columns) -> pd.DataFrame:
    for c in columns:
        if pd.api.types.is_bool_dtype(df[c]):
            continue
        if c == "use_gated_mlp" and not pd.api.types.is_numeric_dtype(df[c]):
            df[c] = df[c].astype(str).str.strip().str.lower().map({"true": True, "false": False})
            continue
        vals = pd.to_numeric(df[c], errors="coerce")
        if vals.isna().all() and len(df):
            raise profile_error(SOURCE, f"{path} column {c!r} holds no numbers")
        df[c] = vals
    return df


def _medians(df: pd.DataFrame, column: str) -> np.ndarray:
    vals = pd.to_numeric(df[column], errors="coerce") if column in df else None
    if vals is None:
        return np.zeros(len(df))
    return vals.fillna(0.0).to_numpy(dtype=np.float64)


# ---- compute ----


def _mlp_ops(model: ModelSpec, device: str, tp: int, root: Path) -> tuple[pd.DataFrame, Path]:
    path = root / "compute" / device / model.name / "mlp.csv"
    # NOTE(vidur): models without a post-attention norm (phi-2) have no such column or model.
    ops = [op for op in MLP_OPS if op != "post_attention_layernorm" or model.post_attn_norm]
    medians = tuple(_median(op) for op in ops)
    # all columns: Vidur drops duplicate rows over the whole frame
    df = _read(path, root, MLP_FILTERS + ("num_tokens",) + medians, everything=True)
    df = _numeric(df, path, MLP_FILTERS + ("num_tokens",))
    shape = (
        (df.n_head == model.num_q_heads)
        & (df.n_kv_head == model.num_kv_heads)
        & (df.n_embd == model.embedding_dim)
        & (df.n_expanded_embd == model.mlp_hidden_dim)
        & (df.use_gated_mlp == model.use_gated_mlp)
    )
    rows = df[shape & (df.num_tensor_parallel_workers == tp)].drop_duplicates()
    if rows.empty:
        if shape.any():
            tps = sorted(df.loc[shape, "num_tensor_parallel_workers"].dropna().astype(int).unique())
            raise profile_error(
                SOURCE,
                f"no mlp.csv rows for {model.name} at TP {tp} on {device} in {root}; "
                f"available TP: {join(tps)}",
            )
        raise profile_error(
            SOURCE,
            f"{path} has no rows with n_head={model.num_q_heads}, "
            f"n_kv_head={model.num_kv_heads}, n_embd={model.embedding_dim}, "
            f"n_expanded_embd={model.mlp_hidden_dim}, use_gated_mlp={model.use_gated_mlp}",
        )
    tokens = rows.num_tokens.to_numpy(dtype=np.int64)
    parts = {op: (tokens, _medians(rows, _median(op))) for op in ops}
    return token_ops_frame(parts), path


def _attention(model: ModelSpec, device: str, tp: int, block_size: int, root: Path):
    path = root / "compute" / device / model.name / "attention.csv"
    need = ATTN_FILTERS + ATTN_SHAPE + (_median("attn_prefill"), _median("attn_decode"))
    # all columns: Vidur drops duplicate rows over the whole frame
    df = _read(path, root, need, everything=True).drop_duplicates()
    df = _numeric(df, path, ATTN_FILTERS + ATTN_SHAPE)
    shape = (
        (df.n_embd == model.embedding_dim)
        & (df.n_q_head == model.num_q_heads)
        & (df.n_kv_head == model.num_kv_heads)
    )
    rows = df[shape & (df.block_size == block_size) & (df.num_tensor_parallel_workers == tp)]
    if rows.empty:
        avail = df.loc[shape, ["num_tensor_parallel_workers", "block_size"]].dropna()
        combos = sorted({(int(a), int(b)) for a, b in avail.itertuples(index=False)})
        raise profile_error(
            SOURCE,
            f"no attention.csv rows for {model.name} at TP {tp}, block_size {block_size} on "
            f"{device} in {root}; available (TP, block_size): {join(combos)}",
        )
    chunk = rows.prefill_chunk_size.to_numpy(dtype=np.int64)
    kv = rows.kv_cache_size.to_numpy(dtype=np.int64)
    batch = rows.batch_size.to_numpy(dtype=np.int64)
    pre, dec = chunk > 0, chunk == 0
    prefill = frame(
        PREFILL_COLUMNS, kv[pre], chunk[pre], _medians(rows, _median("attn_prefill"))[pre]
    )
    decode = frame(DECODE_COLUMNS, batch[dec], kv[dec], _medians(rows, _median("attn_decode"))[dec])
    kv_save = token_ops_frame(
        {"attn_kv_cache_save": (np.maximum(chunk, batch), _medians(rows, KV_SAVE))}
    )
    return prefill, decode, kv_save, path


# ---- network ----


def _collective(
    path: Path, root: Path, op: str, workers: int | None, dpn: int, e: int
) -> pd.DataFrame:
    df = _read(path, root, NET_COLUMNS + (_median(op),), everything=True).drop_duplicates()
    df = _numeric(df, path, ("size", "num_workers", "devices_per_node"))
    keep = (df.collective.astype(str) == op) & (df.devices_per_node == dpn)
    if workers is not None:
        keep &= df.num_workers == workers
    rows = df[keep]
    if rows.empty:
        sel = df[df.collective.astype(str) == op][["num_workers", "devices_per_node"]].dropna()
        combos = sorted({(int(a), int(b)) for a, b in sel.itertuples(index=False)})
        want = f"num_workers={workers}, " if workers is not None else ""
        raise profile_error(
            SOURCE,
            f"{path} has no {op} rows with {want}devices_per_node={dpn}; "
            f"available (num_workers, devices_per_node): {join(combos)}",
        )
    # Vidur's feature: one token is E fp16 values, whatever the TP degree (fractional here).
    out = pd.DataFrame(
        {
            "num_tokens": rows["size"].to_numpy(dtype=np.float64) / e / 2,
            "time_ms": _medians(rows, _median(op)),
        }
    )
    return out


def _nodes_with(root: Path, filename: str) -> list[str]:
    net = root / "network"
    return sorted(p.name for p in net.iterdir() if (p / filename).is_file()) if net.is_dir() else []


def _network_csv(root: Path, node: NodeSpec, filename: str, why: str) -> Path:
    """network/<node>/<filename>, or a profile error listing the nodes that have it."""
    path = root / "network" / node.name / filename
    if not path.is_file():
        raise profile_error(
            SOURCE,
            f"{why} needs network/{node.name}/{filename}, missing in {root}; "
            f"nodes with {filename}: {join(_nodes_with(root, filename))}",
        )
    return path


# ---- entry points ----


def load(
    model: ModelSpec,
    device: DeviceSpec,
    node: NodeSpec,
    tp: int,
    pp: int,
    *,
    profile_dir,
    block_size: int = 16,
    precision: str = "bf16",
    kv_cache_dtype: str = "bf16",
) -> OperatorSamples:
    """Samples for one model/device/node/TP/PP from a Vidur profiling directory."""
    if profile_dir is None:
        raise profile_error(SOURCE, "predictor.profile_dir must name a Vidur profiling directory")
    root = Path(profile_dir).expanduser().resolve()
    if not root.is_dir():
        raise profile_error(SOURCE, f"profile directory {root} does not exist")
    if precision != "bf16":
        raise profile_error(
            SOURCE, f"Vidur profiles are fp16/bf16 only (got precision {precision!r})"
        )
    if KV_BYTES.get(kv_cache_dtype) != BF16_BYTES:
        raise profile_error(
            SOURCE, f"Vidur profiles have a bf16/fp16 KV cache only (got {kv_cache_dtype!r})"
        )
    if not (root / "compute" / device.name).is_dir():
        devs = sorted(p.name for p in (root / "compute").glob("*") if p.is_dir())
        raise profile_error(
            SOURCE, f"no compute/{device.name} in {root}; available devices: {join(devs)}"
        )
    if Path(model.name).is_absolute() or ".." in Path(model.name).parts:
        raise profile_error(SOURCE, f"model {model.name!r} is not a Hugging Face name")
    if not (root / "compute" / device.name / model.name).is_dir():
        avail = available_models(root, device.name)
        raise profile_error(
            SOURCE,
            f"no compute/{device.name}/{model.name} in {root}; models profiled on {device.name}: "
            f"{join(avail)}",
        )

    mlp, mlp_path = _mlp_ops(model, device.name, tp, root)
    prefill, decode, kv_save, attn_path = _attention(model, device.name, tp, block_size, root)
    files = [mlp_path, attn_path]

    e = model.embedding_dim
    all_reduce = empty_frame(COMM_COLUMNS)
    if tp > 1:
        path = _network_csv(root, node, "all_reduce.csv", f"TP {tp}")
        all_reduce = _collective(path, root, "all_reduce", tp, tp, e)
        files.append(path)
    send_recv = empty_frame(COMM_COLUMNS)
    if pp > 1:
        path = _network_csv(root, node, "send_recv.csv", f"PP {pp}")
        # NOTE(vidur): a replica spanning nodes uses the cross-node rows (devices_per_node 1).
        dpn = 1 if tp * pp > node.gpus_per_node else 2
        send_recv = _collective(path, root, "send_recv", None, dpn, e)
        files.append(path)

    token_ops = pd.concat([mlp, kv_save], ignore_index=True)
    provenance = {
        "source": SOURCE,
        "files": {str(p.relative_to(root)): file_digest(p) for p in files},
        "model": model.name,
        "device": device.name,
        "node": node.name,
        "tp": tp,
        "pp": pp,
        "block_size": block_size,
        "precision": precision,
    }
    return OperatorSamples(SOURCE, token_ops, decode, prefill, all_reduce, send_recv, provenance)


def available_models(root: Path, device: str) -> list[str]:
    base = root / "compute" / device
    return sorted(str(p.parent.relative_to(base)) for p in base.glob("**/mlp.csv"))


def available(profile_dir) -> dict:
    """What a Vidur profiling directory holds (file lists only; nothing is parsed)."""
    if profile_dir is None:
        return {"profile_dir": None, "devices": {}, "nodes": {}}
    root = Path(profile_dir).expanduser().resolve()
    compute = root / "compute"
    devices = {}
    if compute.is_dir():
        for dev in sorted(p.name for p in compute.iterdir() if p.is_dir()):
            models = {}
            for mlp in sorted((compute / dev).glob("**/mlp.csv")):
                name = str(mlp.parent.relative_to(compute / dev))
                models[name] = sorted(f.name for f in mlp.parent.glob("*.csv"))
            devices[dev] = models
    nodes = {}
    if (root / "network").is_dir():
        for n in sorted(p for p in (root / "network").iterdir() if p.is_dir()):
            nodes[n.name] = sorted(f.name for f in n.glob("*.csv"))
    return {"profile_dir": str(root), "devices": devices, "nodes": nodes}
