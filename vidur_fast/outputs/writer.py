"""Write a run directory safely.

- Atomic: every file goes to a hidden temp dir beside the target, renamed into place at the
  end; on any error, interrupt or signal the temp dir (and the parents this run created) are
  removed.
- Exclusive: a run claims its directory before simulating (a lock file beside it, held with
  an OS lock for the life of the process), so two runs cannot own one directory.
- Overwrite-safe: `--output.overwrite` replaces only a directory that a vidur-fast run wrote
  (it carries the MARKER file) or an empty one; never the working directory or a parent of it.
- Crash-safe: temp dirs left by a process that died (kill -9, power loss) are removed by the
  next run in the same parent.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from vidur_fast.config.convert import config_dict
from vidur_fast.config.sim import OutputConfig
from vidur_fast.config.validate import validate_output
from vidur_fast.errors import ConfigError
from vidur_fast.metrics.result import Result
from vidur_fast.metrics.summary import hist_bucket_upper_s
from vidur_fast.outputs.h5 import write_metrics_h5
from vidur_fast.outputs.request_csv import write_request_csv

try:  # POSIX; elsewhere the lock file's exclusive creation alone guards the directory
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

MARKER = ".vidur-fast-run"
"""File in every run directory: it marks the directory as one that --output.overwrite may
replace. Its content is fixed, so identical runs still give identical directories."""
MARKER_TEXT = '{"written_by": "vidur-fast", "kind": "run"}\n'

_TAG = "vidur-fast"
# .<name>.vidur-fast-<pid>.<random>.tmp (a run being written) or ....old.tmp (a replaced run)
_TEMP_RE = re.compile(r"^\..*\.vidur-fast-(\d+)\.[A-Za-z0-9_]+(\.old)?\.tmp$")


def is_run_dir(path: Path) -> bool:
    """True when path is a directory a vidur-fast run wrote."""
    return path.is_dir() and (path / MARKER).is_file()


def check_output_dir(out: OutputConfig) -> Path | None:
    """Fail early (before simulating) if the run directory cannot be created or may not be
    replaced."""
    validate_output(out)
    if out.dir is None:
        return None
    if not str(out.dir).strip():
        raise ConfigError("output.dir: empty path; give a directory name (or leave it unset)")
    path = Path(out.dir)
    resolved = path.resolve()
    cwd = Path.cwd().resolve()
    if resolved == cwd or cwd.is_relative_to(resolved):
        what = "the working directory" if resolved == cwd else "a parent of the working directory"
        raise ConfigError(f"output.dir: {out.dir} is {what}; give a new directory for the run")
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise ConfigError(f"output.dir: {path} exists and is not a directory")
        if not out.overwrite:
            raise ConfigError(f"output.dir: {path} already exists (pass --output.overwrite)")
        _check_replaceable(path)
    parent = path.parent if str(path.parent) else Path(".")
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"output.dir: {probe} is not a directory")
    # os.access says yes to root on read-only file systems: try a real (removed) directory
    try:
        Path(tempfile.mkdtemp(prefix=".vidur-fast-probe.", dir=probe)).rmdir()
    except OSError:
        raise ConfigError(f"output.dir: cannot write under {probe}") from None
    return path


def check_output_file(path: str, flag: str) -> Path:
    """Fail early (before any work) unless a file can be written at path: its directory
    exists and is writable, and path is not a directory."""
    if not str(path).strip():
        raise ConfigError(f"{flag}: empty path; give a file name")
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag}: {path} is a directory; give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        what = "does not exist" if not parent.exists() else "is not a directory"
        raise ConfigError(f"{flag}: directory {parent} {what}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".vidur-fast-probe.", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot write in {parent} ({exc.strerror or exc})") from None
    return p


def _check_replaceable(path: Path) -> None:
    if path.is_symlink():
        raise ConfigError(f"output.dir: {path} is a symbolic link; --output.overwrite refuses it")
    if is_run_dir(path):
        return
    try:
        empty = not any(path.iterdir())
    except OSError as exc:
        raise ConfigError(f"output.dir: cannot read {path} ({exc.strerror or exc})") from None
    if not empty:
        raise ConfigError(
            f"output.dir: {path} is not a vidur-fast run directory (no {MARKER} file); "
            "--output.overwrite replaces only run directories, give a new path"
        )


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def clean_stale_temps(parent: Path) -> list[Path]:
    """Remove the temp dirs of runs whose process no longer exists; return what was removed.
    Only directories named and marked as vidur-fast temp dirs are touched."""
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if entry.name.endswith(f".{_TAG}.lock") and _remove_if_unlocked(entry):
            removed.append(entry)
            continue
        m = _TEMP_RE.match(entry.name)
        if m is None or not entry.is_dir() or entry.is_symlink():
            continue
        if _pid_alive(int(m.group(1))):
            continue
        try:
            marked = (entry / MARKER).is_file() or not any(entry.iterdir())
        except OSError:
            continue
        if marked:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _remove_if_unlocked(lock: Path) -> bool:
    """Remove a lock file that no live process holds (its run was killed outright)."""
    if fcntl is None or not lock.is_file() or lock.is_symlink():
        return False
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False  # held: a run is writing
    try:
        if os.fstat(fd).st_ino == os.stat(lock).st_ino:
            lock.unlink()
            return True
    except OSError:
        pass
    finally:
        os.close(fd)
    return False


class RunDirClaim:
    """Exclusive ownership of a run directory path, from before the simulation to after the
    rename. Created by claim_output_dir; release() (or leaving the `with` block) gives it up
    and, unless the run was written, removes the parents the claim created."""

    def __init__(self, path: Path, created: list[Path], lock: Path, fd: int | None):
        self.path = path
        self.created = created
        self.lock = lock
        self._fd = fd
        self.written = False

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.lock.unlink()
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if not self.written:
            for p in reversed(self.created):
                with contextlib.suppress(OSError):
                    p.rmdir()
            self.created = []

    def __enter__(self) -> "RunDirClaim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _lock_path(path: Path) -> Path:
    return path.parent / f".{path.name}.{_TAG}.lock"


def _take_lock(lock: Path, path: Path) -> int:
    """Open and lock the lock file; raise ConfigError when another live run holds it."""
    busy = ConfigError(f"output.dir: {path} is being written by another run; wait or pick another")
    for _ in range(20):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"output.dir: cannot write {lock.parent} ({exc.strerror})") from None
        if fcntl is None:
            return fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise busy from None
        # the holder may have unlinked the file between our open and flock: retry on the new one
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)
    raise busy


def claim_output_dir(out: OutputConfig) -> RunDirClaim | None:
    """Check out.dir (check_output_dir) and claim it for this process; None when out.dir is
    unset. Creates the missing parents (removed again on release unless the run is written)."""
    path = check_output_dir(out)
    if path is None:
        return None
    created = _missing_parents(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        for p in reversed(created):
            with contextlib.suppress(OSError):
                p.rmdir()
        raise ConfigError(f"output.dir: cannot create {path.parent} ({exc.strerror})") from None
    lock = _lock_path(path)
    try:
        fd = _take_lock(lock, path)
    except BaseException:
        for p in reversed(created):
            with contextlib.suppress(OSError):
                p.rmdir()
        raise
    claim = RunDirClaim(path, created, lock, fd)
    try:
        clean_stale_temps(path.parent)
        check_output_dir(out)  # a run that finished while we waited for the lock
    except BaseException:
        claim.release()
        raise
    return claim


def _json_default(obj):
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return str(obj)


def _missing_parents(path: Path) -> list[Path]:
    """Ancestors of path that do not exist yet, outermost first."""
    out = []
    for p in path.parents:
        if p.exists():
            break
        out.append(p)
    return out[::-1]


def _temp_name(path: Path, old: bool = False) -> str:
    return f".{path.name}.{_TAG}-{os.getpid()}.{secrets.token_hex(4)}{'.old' if old else ''}.tmp"


def write_run(result: Result, out: OutputConfig, claim: RunDirClaim | None = None) -> Path:
    """Write config.json, summary.json, metrics.h5, the request tables and, when asked, plots/
    and trace.json under out.dir, plus the MARKER file.

    Atomic (see the module docstring). claim: the directory's claim taken before the run
    (claim_output_dir); without one, this call claims it. summary.json is deterministic except
    its `wall_time` section (seconds each phase took on this machine).
    """
    own = claim is None
    if own:
        claim = claim_output_dir(out)
        if claim is None:
            raise ConfigError("output.dir: no run directory given")
    try:
        return _write_claimed(result, out, claim)
    finally:
        if own:
            claim.release()


def _write_claimed(result: Result, out: OutputConfig, claim: RunDirClaim) -> Path:
    path = claim.path
    tmp = old = None
    try:
        tmp = path.parent / _temp_name(path)
        tmp.mkdir(mode=0o755)
        (tmp / MARKER).write_text(MARKER_TEXT)
        cfg_json = json.dumps(config_dict(result.config), indent=2, default=_json_default)
        (tmp / "config.json").write_text(cfg_json + "\n")
        summary = dict(result.summary)
        summary["wall_time"] = {k: round(float(v), 6) for k, v in result.phases_s.items()}
        (tmp / "summary.json").write_text(
            json.dumps(summary, indent=2, default=_json_default) + "\n"
        )
        # the request tables (and Vidur's plots/ tables) are written by Arrow, which runs
        # without the GIL: in a second thread they overlap with metrics.h5
        with ThreadPoolExecutor(max_workers=1) as pool:
            side = []
            if out.write_request_csv:
                side.append(
                    pool.submit(
                        write_request_csv, result.request_columns, tmp / "request_metrics.csv"
                    )
                )
            if out.write_parquet:
                side.append(
                    pool.submit(result.requests.to_parquet, tmp / "requests.parquet", index=False)
                )
            if out.vidur_plots != "none":
                from vidur_fast.outputs.vidur_layout import write_vidur_plots

                side.append(
                    pool.submit(
                        write_vidur_plots,
                        result.request_columns,
                        tmp / "plots",
                        out.vidur_plots,
                    )
                )
            if out.write_metrics_h5:
                # without wall_time, so that identical runs give identical files
                summary_json = json.dumps(result.summary, sort_keys=True, default=_json_default)
                write_metrics_h5(
                    tmp / "metrics.h5", result, cfg_json, summary_json, hist_bucket_upper_s()
                )
            for job in side:
                job.result()
        if out.write_plots or out.write_trace:
            _write_views(tmp, result, out, path.name)
        if path.exists() or path.is_symlink():
            if not out.overwrite:
                raise ConfigError(f"output.dir: {path} already exists (pass --output.overwrite)")
            _check_replaceable(path)
            old = path.parent / _temp_name(path, old=True)
            os.replace(path, old)  # kept until the new run is in place
        os.replace(tmp, path)
        tmp = None
        claim.written = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
            old = None
    except BaseException as exc:
        if old is not None and not (path.exists() or path.is_symlink()):
            with contextlib.suppress(OSError):
                os.replace(old, path)  # put the replaced run back
                old = None
        for p in (tmp, old):
            if p is not None:
                shutil.rmtree(p, ignore_errors=True)
        if isinstance(exc, OSError):
            raise ConfigError(f"output.dir: cannot write {path} ({exc.strerror or exc})") from None
        raise
    return path


def _write_views(tmp: Path, result: Result, out: OutputConfig, name: str) -> None:
    from vidur_fast.outputs.reader import run_data_from_result

    run = run_data_from_result(result, name=name)
    if out.write_plots:
        from vidur_fast.outputs.plots import write_plots

        write_plots(run, tmp / "plots")
    if out.write_trace:
        from vidur_fast.outputs.perfetto import write_trace

        write_trace(
            tmp / "trace.json",
            run.batches,
            run.replicas,
            run.pp,
            out.trace_every,
            out.trace_start_s,
            out.trace_end_s,
            replica_pp=run.replica_pp if run.pools else None,
            pools=run.summary.get("pools"),
            requests=run.requests,
        )
