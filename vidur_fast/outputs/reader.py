"""Read a run directory back into DataFrames: `read_run(path) -> RunData`."""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from vidur_fast.errors import RunDirError
from vidur_fast.outputs.h5 import read_metrics_h5
from vidur_fast.outputs.timeseries import replica_timeseries


@dataclass
class RunData:
    """One run's tables; the same attribute names as `api.Result` where they overlap."""

    name: str
    summary: dict
    config: dict
    requests: pd.DataFrame
    batches: pd.DataFrame
    replicas: pd.DataFrame
    tbt_histogram: np.ndarray
    tbt_upper_edge_s: np.ndarray
    timeseries: dict[int, pd.DataFrame] = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)

    @property
    def pp(self) -> int:
        return int(self.config.get("cluster", {}).get("pp", 1))

    @property
    def pools(self) -> list[dict]:
        """cluster.pools as config.json holds them (empty for a one-pool run)."""
        return list(self.config.get("cluster", {}).get("pools") or [])

    @property
    def replica_pp(self) -> list[int]:
        """Pipeline stages of each replica (its pool's pp with cluster.pools)."""
        if not self.pools:
            return [self.pp] * len(self.replicas)
        return [int(p.get("pp", 1)) for p in self.pools for _ in range(p.get("num_replicas", 1))]


def run_data_from_result(result, name: str = "run") -> RunData:
    """Wrap an in-memory `api.Result` so plots and traces take either."""
    from vidur_fast.config.convert import config_dict
    from vidur_fast.metrics.summary import hist_bucket_upper_s

    return RunData(
        name=name,
        summary=result.summary,
        config=config_dict(result.config),
        requests=result.requests,
        batches=result.batches,
        replicas=result.replicas,
        tbt_histogram=np.asarray(result.tbt_histogram),
        tbt_upper_edge_s=hist_bucket_upper_s(),
        timeseries=replica_timeseries(result.batches, result.replicas),
    )


def _load_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{path}: cannot read JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: expected a JSON object")
    return data


def read_summary(path: str | Path) -> dict:
    """summary.json of a run directory (RunDirError when it is not a run directory)."""
    p = Path(path)
    if not p.is_dir():
        raise RunDirError(f"{p}: not a directory")
    if not (p / "summary.json").is_file():
        raise RunDirError(f"{p}: not a run directory (no summary.json)")
    return _load_json(p / "summary.json")


def read_run(path: str | Path) -> RunData:
    """summary.json, config.json and metrics.h5 of a run directory as DataFrames."""
    p = Path(path)
    summary = read_summary(p)
    config = _load_json(p / "config.json") if (p / "config.json").is_file() else {}
    h5 = p / "metrics.h5"
    if not h5.is_file():
        raise RunDirError(f"{p}: no metrics.h5 (the run was written without it)")
    try:
        data = read_metrics_h5(h5)
    except (OSError, KeyError, ValueError, IndexError) as exc:
        raise RunDirError(f"{h5}: unreadable ({type(exc).__name__})") from None
    hist = data["tbt_histogram"]
    timeseries = data["timeseries"]
    if not timeseries and len(data["batches"]) and len(data["replicas"]):
        # files written before the timeseries group existed
        timeseries = replica_timeseries(data["batches"], data["replicas"])
    return RunData(
        name=p.resolve().name,
        summary=summary,
        config=config,
        requests=data["requests"],
        batches=data["batches"],
        replicas=data["replicas"],
        tbt_histogram=hist["count"].to_numpy() if "count" in hist else np.zeros(0, np.int64),
        tbt_upper_edge_s=hist["upper_edge_s"].to_numpy() if "upper_edge_s" in hist else np.zeros(0),
        timeseries=timeseries,
        attrs=data["attrs"],
    )
