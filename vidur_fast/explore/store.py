"""A sweep directory: an append-only JSON-lines log of finished items (the resume record)
and tables rewritten from it (parquet + csv)."""

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from vidur_fast.explore.errors import SweepFileError

MARKER = "sweep.json"


def _clean(value: Any) -> Any:
    # NaN/inf are not JSON; store them as null
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class ResultLog:
    """Finished items by id, persisted one JSON line per item as soon as it finishes."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: dict[str, dict] = {}
        if path.exists():
            with path.open() as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        entry = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut short by an interrupted run: redo that item
                    self.entries[entry["id"]] = entry["data"]
        self._file = None

    def add(self, item_id: str, data: dict) -> None:
        if self._file is None:
            self._file = self.path.open("a")
        clean = {k: _clean(v) for k, v in data.items()}
        self._file.write(json.dumps({"id": item_id, "data": clean}, default=str) + "\n")
        self._file.flush()
        self.entries[item_id] = clean

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def prepare_dir(out: str, kind: str, description: dict) -> Path:
    """Create (or reopen for resuming) a sweep directory; refuse a directory that holds
    something else or the other command's results."""
    path = Path(out)
    marker = path / MARKER
    if path.exists():
        if not path.is_dir():
            raise SweepFileError(f"out: {out} exists and is not a directory")
        if marker.exists():
            found = json.loads(marker.read_text()).get("kind")
            if found != kind:
                raise SweepFileError(f"out: {out} holds {found} results, not {kind}")
        elif any(path.iterdir()):
            raise SweepFileError(f"out: {out} exists, is not empty and is not a {kind} directory")
    path.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"kind": kind, **description}, indent=2, default=str) + "\n")
    return path


def write_table(df: pd.DataFrame, path: Path, stem: str) -> None:
    """stem.parquet and stem.csv, each written to a temp file and renamed into place."""
    for suffix in (".parquet", ".csv"):
        fd, tmp = tempfile.mkstemp(dir=path, prefix=f".{stem}", suffix=suffix)
        os.close(fd)
        if suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)
        os.replace(tmp, path / f"{stem}{suffix}")
