"""Locating and reading NVIDIA aiconfigurator's measured tables.

Layout (installed PyPI package `aiconfigurator_core`, or a copy given as profile_dir):
    <systems>/<system>.yaml                          hardware spec (bandwidths, p2p latency)
    <systems>/data/<system>/<family>/<backend>/<version>/<table>.parquet
A copy may also keep data/ next to systems/ (as a reference copy of the tables may).
"""

import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import yaml
from packaging.version import InvalidVersion, Version

from vidur_fast.timing.sources._common import join, profile_error

SOURCE = "aiconfigurator"
PACKAGE = "aiconfigurator_core"
BACKENDS = ("vllm", "trtllm", "sglang")


@dataclass(frozen=True)
class AicSystem:
    """One aiconfigurator system: its spec YAML and its data directory."""

    name: str
    yaml_path: Path
    data_dir: Path
    spec: dict

    def gpu(self, key: str) -> float:
        return _spec_value(self, "gpu", key)

    def node(self, key: str) -> float:
        return _spec_value(self, "node", key)


def _spec_value(system: AicSystem, section: str, key: str) -> float:
    try:
        return float(system.spec[section][key])
    except (KeyError, TypeError, ValueError):
        raise profile_error(SOURCE, f"{system.yaml_path} lacks a numeric {section}.{key}") from None


def package_root() -> Path | None:
    """The installed package's systems directory, or None if the package is absent."""
    try:
        return Path(str(resources.files(PACKAGE).joinpath("systems")))
    except ModuleNotFoundError:
        return None


def systems_root(profile_dir) -> Path:
    if profile_dir is not None:
        root = Path(profile_dir).expanduser().resolve()
        if not root.is_dir():
            raise profile_error(SOURCE, f"profile directory {root} does not exist")
        return root
    root = package_root()
    if root is None or not root.is_dir():
        raise profile_error(SOURCE, f"the PyPI package {PACKAGE} is not installed")
    return root


def _yaml_path(root: Path, name: str) -> Path | None:
    for cand in (root / f"{name}.yaml", root / "systems" / f"{name}.yaml"):
        if cand.is_file():
            return cand
    return None


def _has_tables(data_dir: Path) -> bool:
    # some systems ship only a placeholder (.gitkeep) directory
    return data_dir.is_dir() and next(data_dir.glob("*/*/*/*.parquet"), None) is not None


def _data_dir(root: Path, yaml_file: Path, spec: dict, name: str) -> Path | None:
    cands = []
    if isinstance(spec.get("data_dir"), str):
        cands.append(yaml_file.parent / spec["data_dir"])
    cands += [root / "data" / name, root / "systems" / "data" / name]
    return next((c for c in cands if _has_tables(c)), None)


def list_systems(profile_dir=None) -> list[str]:
    """Systems that have both a spec YAML and measured tables."""
    root = systems_root(profile_dir)
    names = set()
    for base in (root / "data", root / "systems" / "data"):
        if base.is_dir():
            names |= {p.name for p in base.iterdir() if _has_tables(p)}
    return sorted(n for n in names if _yaml_path(root, n) is not None)


@lru_cache(maxsize=64)
def _load_system(root: str, name: str) -> AicSystem | None:
    yaml_file = _yaml_path(Path(root), name)
    if yaml_file is None:
        return None
    try:
        spec = yaml.safe_load(yaml_file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise profile_error(SOURCE, f"cannot read {yaml_file}: {exc}") from None
    if not isinstance(spec, dict):
        raise profile_error(SOURCE, f"{yaml_file} is not a mapping")
    data = _data_dir(Path(root), yaml_file, spec, name)
    return None if data is None else AicSystem(name, yaml_file, data, spec)


def get_system(name: str, profile_dir=None) -> AicSystem:
    root = systems_root(profile_dir)
    system = _load_system(str(root), name)
    if system is None:
        raise profile_error(
            SOURCE,
            f"no data for system {name!r} in {root}; systems: {join(list_systems(profile_dir))}",
        )
    return system


def _version_key(v: str):
    try:
        return (1, Version(v))
    except InvalidVersion:
        return (0, Version("0"))


def table_versions(system: AicSystem, family: str, backend: str, table: str) -> list[str]:
    """Version folders of family/backend that hold `table`, newest first."""
    base = system.data_dir / family / backend
    if not base.is_dir():
        return []
    found = [p.name for p in base.iterdir() if (p / table).is_file()]
    return sorted(found, key=_version_key, reverse=True)


def backends_with(system: AicSystem, family: str, table: str) -> list[str]:
    base = system.data_dir / family
    if not base.is_dir():
        return []
    return sorted(b.name for b in base.iterdir() if table_versions(system, family, b.name, table))


def newest_table(system: AicSystem, family: str, backend: str, table: str) -> tuple[str, Path]:
    """(version, path) of the newest version folder of `backend` holding `table`."""
    versions = table_versions(system, family, backend, table)
    if not versions:
        raise profile_error(
            SOURCE,
            f"no {family}/{backend}/*/{table} for {system.name} in {system.data_dir}; "
            f"backends with it: {join(backends_with(system, family, table))}",
        )
    return versions[0], system.data_dir / family / backend / versions[0] / table


@lru_cache(maxsize=64)
def _read_parquet(path: str, mtime_ns: int, size: int, columns: tuple[str, ...]) -> pd.DataFrame:
    return pq.read_table(path, columns=list(columns)).to_pandas()


def read_table(path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()):
    """The named columns of one parquet table (cached; callers must not mutate the result)."""
    try:
        names = pq.read_schema(path).names
    except (OSError, ValueError) as exc:
        raise profile_error(SOURCE, f"cannot read {path}: {exc}") from None
    missing = [c for c in required if c not in names]
    if missing:
        raise profile_error(SOURCE, f"{path} lacks column {missing[0]!r}")
    cols = tuple(required) + tuple(c for c in optional if c in names)
    st = os.stat(path)
    try:
        return _read_parquet(str(path), st.st_mtime_ns, st.st_size, cols)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise profile_error(SOURCE, f"cannot read {path}: {exc}") from None


def pick_fastest_kernel(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One latency per key: the median over repeated rows of a kernel, then the fastest kernel.

    Several kernel implementations are measured for some shapes (e.g. FlashInfer's prefill and
    decode paths for 1-token queries); the backend dispatches to the faster one.
    """
    group = keys + ["kernel_source"] if "kernel_source" in df else keys
    med = df.groupby(group, as_index=False)["latency"].median()
    return med.groupby(keys, as_index=False)["latency"].min()
