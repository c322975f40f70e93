"""Cached kernels compiled from other kernel sources are dropped before any loads: Numba alone
would keep a caller's machine code after an edit of the kernel it calls, in another file."""

import textwrap

from tests.helpers.fresh_python import run_fresh_python
from vidur_fast.kernel_bundle import STAMP_NAME, drop_stale

CALLEE = textwrap.dedent(
    """
    from numba import njit


    @njit(cache=True, nogil=True, _nrt=False)
    def bump_nb(x):
        return x + {step}
    """
)

CALLER = textwrap.dedent(
    """
    from numba import njit

    from toy_pkg.callee import bump_nb


    @njit(cache=True, nogil=True, _nrt=False)
    def loop_nb(x):
        return bump_nb(x) * 10
    """
)

# Calls the caller after (optionally) the guard for the toy package; prints the result.
CALL = textwrap.dedent(
    """
    import sys

    from vidur_fast.kernel_bundle import drop_stale_kernels

    if sys.argv[1] == "guard":
        drop_stale_kernels(("toy_pkg",), probe="caller")
    from toy_pkg.caller import loop_nb

    print(loop_nb(1))
    """
)


def _toy(root, step):
    pkg = root / "toy_pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "callee.py").write_text(CALLEE.format(step=step))
    (pkg / "caller.py").write_text(CALLER)
    # Python's own bytecode cache checks a source's mtime in whole seconds and its size: the
    # edit is the same size and may fall in the same second, and a stale .pyc would hand the
    # recompiling kernel the old callee (Numba's .nbi/.nbc entries stay: they are under test)
    for pyc in (pkg / "__pycache__").glob("*.pyc"):
        pyc.unlink()


def _call(root, mode, pythonpath):
    return run_fresh_python(["-c", CALL, mode], root, [str(root), *pythonpath])


def test_an_edited_callee_reaches_a_cached_caller_only_with_the_guard(tmp_path):
    import sys

    _toy(tmp_path, step=1)
    assert _call(tmp_path, "plain", sys.path) == "20"
    _toy(tmp_path, step=2)  # the callee's file changes, the caller's does not
    assert _call(tmp_path, "plain", sys.path) == "20"  # Numba's cache: the old callee
    assert _call(tmp_path, "guard", sys.path) == "30"  # stale entries dropped: recompiled
    assert _call(tmp_path, "guard", sys.path) == "30"  # and cached again under the new stamp
    assert (tmp_path / "toy_pkg" / "__pycache__" / STAMP_NAME).is_file()


def test_only_numba_cache_files_go_and_a_matching_stamp_keeps_them(tmp_path):
    for name in ("loop.run_nb-1.py311.nbi", "loop.run_nb-1.py311.1.nbc", "loop.cpython-311.pyc"):
        (tmp_path / name).write_bytes(b"x")
    assert drop_stale(tmp_path, "abc") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop.cpython-311.pyc", STAMP_NAME]
    (tmp_path / "loop.run_nb-1.py311.nbi").write_bytes(b"x")
    assert drop_stale(tmp_path, "abc") == 0  # same sources: the cache stays
    assert drop_stale(tmp_path, "abd") == 1  # other sources: dropped again
