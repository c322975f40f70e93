"""Find a cached grid without loading its operator samples.

The grid cache key hashes the samples' content, so a warm run would still read and parse the
whole source (hundreds of ms for aiconfigurator's database) just to compute it. This memo maps
a cheap fingerprint of everything the samples are derived from (source, specs, parallelism,
loader options, the source files' sizes and mtimes, the loader code, package versions) to the
content key of the grids built last time. Any change to an input changes the fingerprint, and
the run falls back to loading the samples.
"""

import hashlib
import json
import os
from dataclasses import asdict
from functools import cache
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from vidur_fast.catalog import DeviceSpec, ModelSpec, NodeSpec
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.timing.cache import GRID_FORMAT_VERSION, value_settings

_SOURCES_DIR = Path(__file__).resolve().parent / "sources"


def _files_state(root: Path) -> list:
    """(relative path, size, mtime_ns) of every file under root (or of root itself)."""
    if root.is_file():
        st = root.stat()
        return [(root.name, st.st_size, st.st_mtime_ns)]
    out = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            try:
                st = p.stat()
            except OSError:
                continue
            out.append((str(p.relative_to(root)), st.st_size, st.st_mtime_ns))
    return sorted(out)


@cache
def package_version(package: str) -> str | None:
    """The installed version of package (None: not installed), as importlib.metadata.version
    gives it, from the Version line of its metadata: version() parses the whole file with the
    email parser, long descriptions included (~3 ms a package, 20-30 ms a run)."""
    try:
        dist = distribution(package)
    except PackageNotFoundError:
        return None
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    for line in text.splitlines():
        if not line:  # the end of the headers
            break
        if line.startswith("Version:"):
            return line.removeprefix("Version:").strip()
    return dist.version


def _version(package: str) -> str:
    found = package_version(package)
    return "none" if found is None else found


def input_fingerprint(
    model: ModelSpec,
    device: DeviceSpec,
    node: NodeSpec,
    tp: int,
    pp: int,
    cfg: PredictorConfig,
    block_size: int,
) -> str:
    """Hex sha256 over the inputs of load_samples + the grid settings."""
    data_dir = None
    if cfg.profile_dir is not None:
        data_dir = _files_state(Path(cfg.profile_dir).expanduser())
    head = {
        "format": GRID_FORMAT_VERSION,
        "source": cfg.source,
        "model": asdict(model),
        "device": asdict(device),
        "node": asdict(node),
        "tp": tp,
        "pp": pp,
        "backend": cfg.backend,
        "precision": cfg.precision,
        "kv_cache_dtype": cfg.kv_cache_dtype,
        "decode_attention_kv_dtype": cfg.decode_attention_kv_dtype,
        "kernel_envelope": cfg.kernel_envelope,
        "block_size": block_size,
        "settings": value_settings(cfg),
        "profile_dir": data_dir,
        "loader_code": [f for f in _files_state(_SOURCES_DIR) if f[0].endswith(".py")],
        "versions": {p: _version(p) for p in ("aiconfigurator-core", "vidur-fast", "pandas")},
    }
    if cfg.allreduce_rms_fusion:  # inputs without the fusion keep their fingerprint
        head["allreduce_rms_fusion"] = True
    if model.moe is not None:  # dense inputs keep their fingerprint
        head["moe"] = [cfg.moe_ep, cfg.attention_dp, cfg.moe_routing, cfg.moe_kernel]
    text = json.dumps(head, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _memo_path(cache_dir: Path, fingerprint: str) -> Path:
    return Path(cache_dir) / f"inputs-{fingerprint[:32]}.json"


def read_memo(cache_dir: Path, fingerprint: str) -> str | None:
    """The grid key recorded for these inputs, or None."""
    try:
        record = json.loads(_memo_path(cache_dir, fingerprint).read_text())
    except (OSError, ValueError):
        return None
    if record.get("fingerprint") != fingerprint or not isinstance(record.get("key"), str):
        return None
    return record["key"]


def write_memo(cache_dir: Path, fingerprint: str, key: str) -> None:
    """Record key for these inputs (best effort: an unwritable cache only costs speed)."""
    path = _memo_path(cache_dir, fingerprint)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"fingerprint": fingerprint, "key": key}) + "\n")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
