"""Fault injection through a real `vidur-fast` process: a driver that stalls the run in a
chosen phase (so a test can signal it there), and polling helpers that wait for a state
rather than sleeping fixed times."""

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

# argv: PHASE FLAG_FILE CLI_ARGS...; touches FLAG_FILE once the run is stalled in PHASE
DRIVER = r"""
import sys, time, pathlib
phase, flag, argv = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3:]

def stall():
    flag.write_text("stalled")
    time.sleep(300)

if phase == "claim":  # the directory is claimed, nothing simulated yet
    import vidur_fast.outputs.writer as w
    real_clean = w.clean_stale_temps
    def clean(parent):
        real_clean(parent)
        stall()
    w.clean_stale_temps = clean
elif phase == "simulate":  # inside the simulation's driver loop
    import vidur_fast.engine.run as r
    real_run, calls = r.loop.run_nb, []
    def run_nb(*a):
        calls.append(1)
        if len(calls) == 2:
            stall()
        return real_run(*a)
    r.loop.run_nb = run_nb
    r.STEPS_PER_CALL = 50
elif phase == "write":  # metrics.h5 written into the temp dir, the rest not yet
    import vidur_fast.outputs.writer as w
    real_h5 = w.write_metrics_h5
    def h5(path, *a):
        real_h5(path, *a)
        stall()
    w.write_metrics_h5 = h5
from vidur_fast.commands.main import main
sys.exit(main(argv))
"""


def start_stalled(phase: str, flag: Path, argv: list[str], env: dict) -> subprocess.Popen:
    """A vidur-fast process (own session) that stalls in phase; see DRIVER."""
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, phase, str(flag), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
        start_new_session=True,
    )


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.05):
    """Poll cond until true; fail the test naming what after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def session_pids(sid: int) -> list[int]:
    """Live processes of the process group sid (a process started with
    start_new_session=True leads a group of that id), zombies excluded; `ps` on Linux and
    macOS."""
    out = subprocess.run(["ps", "-A", "-o", "pid=,pgid=,stat="], capture_output=True, text=True)
    pids = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == str(sid) and not parts[2].startswith("Z"):
            pids.append(int(parts[0]))
    return pids


def hidden_leftovers(root: Path) -> list[str]:
    """Temp dirs and lock files a run could leave behind under root."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob(".*")
        if p.name.endswith((".tmp", ".lock")) or ".vidur-fast-probe." in p.name
    )
