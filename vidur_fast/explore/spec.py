"""The sweep file: a `base` config fragment, a `grid` of field paths -> value lists, and an
optional `capacity` section. Loading checks everything that does not depend on a point."""

from dataclasses import dataclass
from typing import Any

from vidur_fast.config.convert import build_dataclass, check_path, split_path
from vidur_fast.config.files import read_mapping as read_config_mapping
from vidur_fast.config.sim import SimConfig
from vidur_fast.errors import ConfigError
from vidur_fast.explore.errors import SweepFileError

TOP_KEYS = ("base", "grid", "capacity")

# Short grid keys for the usual deployment axes.
ALIASES = {
    "model": "cluster.model",
    "device": "cluster.device",
    "node": "cluster.node",
    "tp": "cluster.tp",
    "pp": "cluster.pp",
    "num_replicas": "cluster.num_replicas",
    "replicas": "cluster.num_replicas",
    "qps": "workload.intervals.qps",
}


@dataclass(frozen=True)
class SweepSpec:
    """A loaded sweep file."""

    source: str
    """Path of the file it came from."""
    base_data: dict
    """The `base` section as written."""
    base: SimConfig
    """The base config every point starts from."""
    grid: dict[str, tuple[str, list]]
    """grid key as written -> (canonical dotted field path, values), in file order."""
    capacity: dict | None
    """The `capacity` section as written (checked by the capacity command)."""


def read_mapping(path: str) -> dict:
    """Parse the sweep file (YAML or JSON) whose top level must be a mapping."""
    try:
        return read_config_mapping(path, "sweep file", "keys " + ", ".join(TOP_KEYS))
    except ConfigError as exc:
        raise SweepFileError(str(exc)) from None


def _canonical_grid(grid: Any) -> dict[str, tuple[str, list]]:
    if grid is None:
        return {}
    if not isinstance(grid, dict):
        raise SweepFileError("grid: must be a mapping of field path -> list of values")
    out: dict[str, tuple[str, list]] = {}
    owner: dict[str, str] = {}
    for key, values in grid.items():
        if not isinstance(key, str) or not key:
            raise SweepFileError(f"grid: keys must be field paths (got {key!r})")
        path = ALIASES.get(key, key)
        if path in owner:
            raise SweepFileError(f"grid.{key}: names the same field as grid.{owner[path]}")
        if not isinstance(values, list):
            raise SweepFileError(f"grid.{key}: must be a list of values (got {values!r})")
        if not values:
            raise SweepFileError(f"grid.{key}: empty list; give at least one value")
        try:
            check_path(SimConfig, split_path(path, f"grid.{key}"), f"grid.{key}")
        except ConfigError as exc:
            raise SweepFileError(str(exc)) from None
        owner[path] = key
        out[key] = (path, values)
    return out


def load_spec(path: str) -> SweepSpec:
    """Read and check a sweep file; raise SweepFileError/ConfigError naming the bad key."""
    data = read_mapping(path)
    for key in data:
        if key not in TOP_KEYS:
            raise SweepFileError(f"{key}: unknown top-level key; allowed: {', '.join(TOP_KEYS)}")
    base_data = data.get("base") or {}
    if not isinstance(base_data, dict):
        raise SweepFileError("base: must be a mapping of SimConfig fields")
    try:
        base = build_dataclass(SimConfig, base_data, "base")
    except ConfigError as exc:
        raise SweepFileError(str(exc)) from None
    capacity = data.get("capacity")
    if capacity is not None and not isinstance(capacity, dict):
        raise SweepFileError("capacity: must be a mapping (slo, start_qps, ...)")
    grid = _canonical_grid(data.get("grid"))
    _check_pool_indices(base, grid)
    return SweepSpec(path, base_data, base, grid, capacity)


POOLS_PATH = "cluster.pools"


def _check_pool_indices(base: SimConfig, grid: dict[str, tuple[str, list]]) -> None:
    """A grid key into cluster.pools[k] needs a pool k in the base or in some pool list of a
    cluster.pools axis (points whose pool list lacks it are recorded with that error)."""
    layouts = [base.cluster.pools]
    for field, values in grid.values():
        if field == POOLS_PATH:
            layouts = [v if isinstance(v, list | tuple) else () for v in values]
    most = max(len(x) for x in layouts)
    for key, (field, _) in grid.items():
        parts = split_path(field)
        if parts[:2] == ["cluster", "pools"] and len(parts) > 2 and isinstance(parts[2], int):
            if parts[2] >= most:
                have = f"{most} pool{'s' if most != 1 else ''}" if most else "no pools"
                raise SweepFileError(
                    f"grid.{key}: no pool [{parts[2]}]; cluster.pools has {have}"
                    + (f" (indices 0-{most - 1})" if most else "")
                )
