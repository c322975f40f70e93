"""A sweep directory: an append-only JSON-lines log of finished items (the resume record)
and tables rewritten from it (parquet + csv)."""

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from vidur_fast.explore.errors import SweepFileError

MARKER = "sweep.json"
LOCK = ".lock"
_TABLE_STEMS = ("results", "capacity", "probes")  # tables write_table writes
_LOCKS: dict[str, int] = {}  # directory -> fd of its held lock

try:
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None


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
                    if isinstance(entry, dict) and isinstance(entry.get("data"), dict):
                        self.entries[str(entry.get("id"))] = entry["data"]
        self._file = None

    def add(self, item_id: str, data: dict) -> None:
        if self._file is None:
            self._file = self.path.open("a+b")
            if self._file.tell() > 0:  # a line cut short by a kill: end it before appending
                self._file.seek(-1, os.SEEK_END)
                if self._file.read(1) != b"\n":
                    self._file.write(b"\n")
        clean = {k: _clean(v) for k, v in data.items()}
        line = json.dumps({"id": item_id, "data": clean}, default=str) + "\n"
        self._file.write(line.encode())
        self._file.flush()
        self.entries[item_id] = clean

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def lock_dir(path: Path) -> int | None:
    """Hold an OS lock on the sweep directory for the life of the process (released when the
    returned fd is closed); a second sweep on the same directory is refused."""
    if fcntl is None:  # pragma: no cover
        return None
    try:
        fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise SweepFileError(f"out: cannot write {path} ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise SweepFileError(f"out: {path} is in use by another run; wait for it to end") from None
    return fd


def prepare_dir(out: str, kind: str, description: dict) -> Path:
    """Create (or reopen for resuming) a sweep directory; refuse a directory that holds
    something else or the other command's results."""
    if not str(out).strip():
        raise SweepFileError("out: empty path; give a directory name (or leave it unset)")
    path = Path(out)
    marker = path / MARKER
    resolved, cwd = path.resolve(), Path.cwd().resolve()
    if resolved == cwd or cwd.is_relative_to(resolved):
        raise SweepFileError(f"out: {out} is the working directory or a parent of it")
    if path.exists():
        if not path.is_dir():
            raise SweepFileError(f"out: {out} exists and is not a directory")
        if marker.exists():
            found = _marker_kind(marker, out)
            if found != kind:
                raise SweepFileError(f"out: {out} holds {found} results, not {kind}")
        elif any(p.name != LOCK for p in path.iterdir()):
            raise SweepFileError(f"out: {out} exists, is not empty and is not a {kind} directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SweepFileError(f"out: cannot write {out} ({exc.strerror or exc})") from None
    fd_lock = lock_dir(path)
    _remove_stale_temps(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path, prefix=f".{MARKER}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"kind": kind, **description}, indent=2, default=str) + "\n")
        os.replace(tmp, marker)
    except OSError as exc:
        if fd_lock is not None:
            os.close(fd_lock)
        raise SweepFileError(f"out: cannot write {out} ({exc.strerror or exc})") from None
    if fd_lock is not None:
        _LOCKS[str(path)] = fd_lock
    return path


def _remove_stale_temps(path: Path) -> None:
    """Temp files of table or marker writes cut short by a kill. Only the lock holder writes
    here, so every one of them is stale."""
    for entry in path.iterdir():
        name = entry.name
        stale = name.startswith(f".{MARKER}.") and name.endswith(".tmp")
        stale |= name.startswith(tuple(f".{s}" for s in _TABLE_STEMS)) and name.endswith(
            (".parquet", ".csv")
        )
        if stale and entry.is_file():
            with contextlib.suppress(OSError):
                entry.unlink()


def release_dir(path: Path) -> None:
    """Give up the lock prepare_dir took on path."""
    fd = _LOCKS.pop(str(path), None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _marker_kind(marker: Path, out: str) -> str:
    """The kind a sweep directory's marker names; a damaged marker is a one-line error."""
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
        found = data.get("kind") if isinstance(data, dict) else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        found = None
    if not isinstance(found, str):
        raise SweepFileError(
            f"out: {marker} is damaged (not the JSON a sweep writes); restore it, or remove "
            f"{out} to start over"
        )
    return found


def write_table(df: pd.DataFrame, path: Path, stem: str) -> None:
    """stem.parquet and stem.csv, each written to a temp file and renamed into place."""
    for suffix in (".parquet", ".csv"):
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=path, prefix=f".{stem}", suffix=suffix)
            os.close(fd)
            if suffix == ".parquet":
                df.to_parquet(tmp, index=False)
            else:
                df.to_csv(tmp, index=False)
            os.replace(tmp, path / f"{stem}{suffix}")
            tmp = None
        except OSError as exc:
            raise SweepFileError(
                f"out: cannot write {path / (stem + suffix)} ({exc.strerror or exc})"
            ) from None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
