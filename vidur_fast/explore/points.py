"""Grid expansion: the cross product of the grid lists applied to the base config.

Each point gets an id, a hash of its resolved config (output settings excluded) and of the
content of every input file it reads (traces, profile directories, model config files), so a
rerun recognises finished points whatever their position in the grid, and reruns the points
whose inputs changed.
"""

import dataclasses
import hashlib
import itertools
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidur_fast.config.convert import (
    NotApplicable,
    config_dict,
    field_types,
    member_name,
    set_path,
    split_path,
    union_members,
)
from vidur_fast.config.sim import SimConfig, cluster_pools
from vidur_fast.errors import ConfigError
from vidur_fast.explore.errors import SweepFileError
from vidur_fast.explore.spec import SweepSpec

# Fields that never change what a simulation computes (where grids are cached neither).
_NOT_HASHED = ("output", "quiet")
_PREDICTOR_NOT_HASHED = ("cache_dir", "cache_mode")
# Config fields that name input files or directories (a model may be a catalog name instead).
_INPUT_FIELDS = ("path", "profile_dir", "model")
# (real path, size, mtime, inode) -> content hash, so that many points share one read
_FILE_HASHES: dict[tuple, str] = {}


def _file_hash(path: Path, st: os.stat_result) -> str:
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    found = _FILE_HASHES.get(key)
    if found is None:
        h = hashlib.sha256()
        try:
            with path.open("rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
            found = h.hexdigest()
        except OSError as exc:
            found = f"unreadable:{exc.errno}"
        _FILE_HASHES[key] = found
    return found


def content_hash(path: str) -> str | None:
    """Hash of what path holds: a file's bytes, or a directory's relative file names and
    their bytes; None when nothing exists there (a catalog name). Pipes and devices are
    never read (they can be read once only): they hash as their path."""
    p = Path(path)
    try:
        st = p.stat()
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(st.st_mode):
        return _file_hash(p.resolve(), st)
    if not stat.S_ISDIR(st.st_mode):
        return f"stream:{path}"
    h = hashlib.sha256()
    for root, dirs, files in os.walk(p):
        dirs.sort()
        for name in sorted(files):
            f = Path(root) / name
            try:
                fst = f.stat()
            except OSError:
                continue
            if stat.S_ISREG(fst.st_mode):
                h.update(f"{f.relative_to(p)}\0{_file_hash(f.resolve(), fst)}\n".encode())
    return h.hexdigest()


def input_hashes(cfg: Any) -> dict[str, str]:
    """Field path -> content hash of every input file or directory the config names."""
    out: dict[str, str] = {}

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            name = f"{prefix}{f.name}"
            if dataclasses.is_dataclass(value):
                walk(value, name + ".")
            elif f.name in _INPUT_FIELDS and isinstance(value, str) and value:
                digest = content_hash(value)
                if digest is not None:
                    out[name] = digest

    walk(cfg, "")
    return out


@dataclass(frozen=True)
class Point:
    """One grid point: its overrides and either a config or the error that prevented one."""

    index: int
    id: str
    overrides: dict[str, Any]
    """grid key -> value as written."""
    config: SimConfig | None
    error: str | None


def config_id(cfg: SimConfig, extra: Any = None) -> str:
    """16 hex digits identifying what cfg (plus optional extra data) computes."""
    data = {k: v for k, v in config_dict(cfg).items() if k not in _NOT_HASHED}
    data["predictor"] = {
        k: v for k, v in data["predictor"].items() if k not in _PREDICTOR_NOT_HASHED
    }
    inputs = input_hashes(cfg)
    blob = json.dumps(
        [data, extra, inputs] if inputs else [data, extra],
        sort_keys=True,
        default=str,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _overrides_id(overrides: dict) -> str:
    blob = json.dumps(["unresolved", overrides], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def apply_overrides(base: SimConfig, grid: dict, overrides: dict) -> SimConfig:
    """base with each grid override applied, shorter paths first (a union member is chosen
    before its knobs are set)."""
    cfg = base
    order = sorted(overrides, key=lambda k: grid[k][0].count("."))
    for key in order:
        path = grid[key][0]
        try:
            cfg = set_path(cfg, split_path(path), overrides[key], path)
        except NotApplicable:
            raise
        except ConfigError as exc:  # a value no point could take: the file is wrong
            msg = str(exc)
            msg = f"grid.{key}{msg[len(path) :]}" if msg.startswith(path) else f"grid.{key}: {msg}"
            raise SweepFileError(msg) from None
    return cfg


def expand(spec: SweepSpec) -> list[Point]:
    """All points of spec's grid in row-major order (the first grid key varies slowest)."""
    keys = list(spec.grid)
    points = []
    for i, combo in enumerate(itertools.product(*(spec.grid[k][1] for k in keys))):
        overrides = dict(zip(keys, combo, strict=True))
        try:
            cfg = apply_overrides(spec.base, spec.grid, overrides)
        except NotApplicable as exc:  # this point's union member lacks the field
            points.append(Point(i, _overrides_id(overrides), overrides, None, str(exc)))
            continue
        points.append(Point(i, config_id(cfg), overrides, cfg, None))
    return points


# ---- labels ----


def member_label(obj: Any) -> str:
    """`name` or `name(field=value, ...)` listing the fields that differ from the defaults."""
    cls = type(obj)
    changed = []
    for f in dataclasses.fields(cls):
        value = getattr(obj, f.name)
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        if value != default:
            shown = member_label(value) if dataclasses.is_dataclass(value) else value
            changed.append(f"{f.name}={shown}")
    return f"{cls.__name__}({', '.join(changed)})" if changed else cls.__name__


def _union_label(owner: type, field: str, obj: Any) -> str:
    members = union_members(field_types(owner)[field])
    label = member_label(obj)
    if members:
        return member_name(members, obj) + label[len(type(obj).__name__) :]
    return label


def describe(cfg: SimConfig) -> dict[str, Any]:
    """Columns that identify a deployment and load in a results table."""
    c = cfg.cluster
    intervals = getattr(cfg.workload, "intervals", None)
    pools = cluster_pools(c)
    return {
        "model": c.model,
        "device": _common([p.device for p in pools], "+"),
        "node": _common([p.node for p in pools], "+"),
        "tp": _common([p.tp for p in pools]),
        "pp": _common([p.pp for p in pools]),
        "num_replicas": sum(p.num_replicas for p in pools),
        "num_pools": len(c.pools),
        "layout": layout_label(pools),
        "gpus": sum(p.num_replicas * p.tp * p.pp for p in pools),
        "scheduler": _union_label(SimConfig, "scheduler", cfg.scheduler),
        "router": _union_label(SimConfig, "router", cfg.router),
        "workload": _union_label(SimConfig, "workload", cfg.workload).split("(")[0],
        "qps": getattr(intervals, "qps", None),
        "seed": cfg.seed,
    }


def _common(values: list, sep: str | None = None) -> Any:
    """The value all pools share; else the distinct values joined by sep (None without sep)."""
    distinct = list(dict.fromkeys(values))
    if len(distinct) == 1:
        return distinct[0]
    if sep is None:
        return None
    return sep.join(str(v) for v in distinct)


_ROLE_MARK = {"prefill": "P", "decode": "D"}


def layout_label(pools) -> str:
    """The pools as one readable string: `1P h100 tp1 + 2D h100 tp1`, `4x h100 tp2 + 2x a100
    tp1 pp2` (P prefill, D decode, x mixed; a node only when one is named)."""
    parts = []
    for p in pools:
        where = p.device if p.node is None else f"{p.device}/{p.node}"
        pp = f" pp{p.pp}" if p.pp != 1 else ""
        parts.append(f"{p.num_replicas}{_ROLE_MARK.get(p.role, 'x')} {where} tp{p.tp}{pp}")
    return " + ".join(parts)


def grid_value_label(value: Any) -> Any:
    """A grid value as a table cell: scalars as they are, mappings as compact JSON."""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return value
