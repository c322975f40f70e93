"""On-disk grid cache: one uncompressed .npz of arrays plus a .json sidecar of metadata.

The key is a sha256 over everything the grid values depend on: the samples' provenance and
content, the value-affecting predictor settings, the parallelism and GRID_FORMAT_VERSION. The
sidecar stores sha256s of the arrays, checked on every load, so a truncated or edited file is
detected instead of silently used. Writes go to a temp file in the same directory, then
os.replace, so readers only ever see a complete file; the sidecar is written last and acts as
the commit mark. No pickle anywhere (np.load(allow_pickle=False)).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.errors import ConfigError
from vidur_fast.timing.grids import GRID_FIELDS
from vidur_fast.timing.samples import OperatorSamples

if TYPE_CHECKING:
    import pandas as pd

# 2: work baselines solved without BLAS (timing/nnls.py); grids of 1 hold other values
# 3: table lookups' log/exp/power by the C library on every CPU (numerics/portable_math.py);
#    grids of 2 built on an AVX-512 CPU hold other last bits
GRID_FORMAT_VERSION = 3
# Settings that change grid values; overheads applied at run time (TimingParams) are not here.
VALUE_FIELDS = (
    "regressor",
    "n_estimators",
    "max_depth",
    "min_samples_split",
    "random_state",
    "polynomial_degree",
    "work_normalized",
    "max_tokens",
    "max_batch_size",
    "max_prefill_chunk",
    "kv_granularity",
    "chunk_granularity",
    "nccl_launch_overhead_ms",
)
_FRAMES = ("token_ops", "decode", "prefill", "all_reduce", "send_recv")


class CacheMiss(Exception):
    """No usable cache entry; the message says why (missing, corrupt, mismatched)."""


class CacheCorrupt(CacheMiss):
    """An entry exists but fails verification (unreadable, truncated, edited); rebuild it."""


def default_cache_dir() -> Path:
    env = os.environ.get("VIDUR_FAST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "vidur-fast" / "grids"


def resolve_cache_dir(cfg: PredictorConfig) -> Path:
    """The grid cache directory; a path that exists but is not a directory is a user error
    naming where it came from."""
    path = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()
    if path.exists() and not path.is_dir():
        where = "predictor.cache_dir" if cfg.cache_dir else "VIDUR_FAST_CACHE"
        raise ConfigError(f"{where}: {path} exists and is not a directory")
    return path


# ---- key ----


def value_settings(cfg: PredictorConfig) -> dict:
    d = asdict(cfg)
    out = {k: d[k] for k in VALUE_FIELDS}
    if cfg.vidur_forests:  # only when set: the keys of every other grid stay as they were
        out["vidur_forests"] = True
    return out


def _hash_frame(h, name: str, frame: pd.DataFrame) -> None:
    h.update(f"frame:{name}:{frame.shape}".encode())
    for col in sorted(frame.columns):
        values = frame[col].to_numpy()
        h.update(f"col:{col}:{values.dtype.str}".encode())
        if values.dtype.kind in "biuf":
            h.update(np.ascontiguousarray(values).tobytes())
        else:
            h.update("\x1f".join(map(str, values)).encode())


def cache_key(samples: OperatorSamples, cfg: PredictorConfig, *, model: str, tp: int, pp: int):
    """Hex sha256 identifying the grids built from samples under cfg."""
    h = hashlib.sha256()
    head = {
        "format": GRID_FORMAT_VERSION,
        "source": samples.source,
        "provenance": samples.provenance,
        "settings": value_settings(cfg),
        "model": model,
        "tp": tp,
        "pp": pp,
    }
    h.update(json.dumps(head, sort_keys=True, default=str).encode())
    for name in _FRAMES:
        _hash_frame(h, name, getattr(samples, name))
    return h.hexdigest()


def array_sha256(arr: np.ndarray) -> str:
    return hashlib.sha256(memoryview(np.ascontiguousarray(arr)).cast("B")).hexdigest()


# ---- files ----


def entry_paths(cache_dir: Path, key: str) -> tuple[Path, Path]:
    stem = Path(cache_dir) / f"grids-{key[:32]}"
    return stem.with_suffix(".npz"), stem.with_suffix(".json")


def _atomic_write(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_entry(cache_dir: Path, key: str, arrays: dict[str, np.ndarray], meta: dict) -> Path:
    """Write arrays and meta (plus key, format and checksums) atomically; returns the npz path."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    npz, side = entry_paths(cache_dir, key)
    arrays = {k: np.ascontiguousarray(arrays[k], dtype=np.float64) for k in GRID_FIELDS}
    record = {
        **meta,
        "key": key,
        "format": GRID_FORMAT_VERSION,
        "arrays": {
            k: {"sha256": array_sha256(a), "shape": list(a.shape), "dtype": a.dtype.str}
            for k, a in arrays.items()
        },
    }
    text = json.dumps(record, indent=1, sort_keys=True, default=str).encode()
    _atomic_write(npz, lambda fh: np.savez(fh, **arrays))
    _atomic_write(side, lambda fh: fh.write(text))
    return npz


def read_npz(path: Path, names) -> dict[str, np.ndarray]:
    """The arrays `names` of an .npz written by np.savez, each read from the file straight into
    its own array: np.load streams an uncompressed member through zipfile and copies it several
    times over (50-150 ms for a 20 MB grid set, against a few ms). A compressed, Fortran-order
    or object member is read by np.load. Integrity is the caller's check (the sidecar's
    sha256); a short member raises ValueError."""
    out = {}
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for name in names:
            info = z.getinfo(f"{name}.npy")
            f.seek(info.header_offset)
            local = f.read(30)
            if info.compress_type != zipfile.ZIP_STORED or local[:4] != b"PK\x03\x04":
                out[name] = _np_load_member(path, name)
                continue
            f.seek(info.header_offset + 30 + int.from_bytes(local[26:28], "little"))
            f.seek(int.from_bytes(local[28:30], "little"), os.SEEK_CUR)
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            if fortran or dtype.hasobject:
                out[name] = _np_load_member(path, name)
                continue
            arr = np.empty(shape, dtype=dtype)
            if arr.nbytes and f.readinto(memoryview(arr.reshape(-1)).cast("B")) != arr.nbytes:
                raise ValueError(f"{name}: fewer bytes than its shape {shape} needs")
            out[name] = arr
    return out


def _np_load_member(path: Path, name: str) -> np.ndarray:
    with np.load(path, allow_pickle=False) as data:
        return data[name]


def load_entry(cache_dir: Path, key: str) -> tuple[dict[str, np.ndarray], dict]:
    """The arrays and sidecar stored under key, verified; raises CacheMiss otherwise."""
    npz, side = entry_paths(cache_dir, key)
    if not side.exists() or not npz.exists():
        raise CacheMiss(f"no cache entry {npz.name}")
    try:
        record = json.loads(side.read_text())
    except (OSError, ValueError) as exc:
        raise CacheCorrupt(f"unreadable sidecar {side}: {_one_line(exc)}") from None
    if not isinstance(record, dict) or not isinstance(record.get("arrays"), dict):
        raise CacheCorrupt(f"sidecar {side} is not a grid record")
    if record.get("key") != key or record.get("format") != GRID_FORMAT_VERSION:
        raise CacheCorrupt(f"sidecar {side} belongs to another key or format")
    try:
        arrays = read_npz(npz, GRID_FIELDS)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise CacheCorrupt(f"unreadable grid file {npz}: {_one_line(exc)}") from None
    for name, arr in arrays.items():
        want = record["arrays"].get(name)
        if not isinstance(want, dict):
            raise CacheCorrupt(f"sidecar {side} has no checksum for {name}")
        if (
            list(arr.shape) != want.get("shape")
            or arr.dtype.str != want.get("dtype")
            or array_sha256(arr) != want.get("sha256")
        ):
            raise CacheCorrupt(f"checksum mismatch for {name} in {npz}")
    return arrays, record


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
