"""Start Numba's CPU target without its registries when the kernels come from the cache.

Loading a kernel from Numba's on-disk cache needs the CPU target's context (its code
generator and the C helpers the machine code calls), not the typing and lowering registries
that compiling needs. Numba's cache load refreshes the context first all the same: it
imports some thirty of Numba's modules (unicode, arrays, linear algebra, random, typed
containers, ...) and installs their registries, and the linear algebra check imports
scipy.linalg to look for BLAS (0.2-0.3 s more): the refresh alone is ~0.2 CPU-s, a fifth
of a small run. start_numba_target() builds the context and makes cache loads skip that
refresh; a kernel missing from the cache still compiles as usual (Numba's compiler refreshes
the context itself before it types anything, and then probes for BLAS: a fraction of a
second of a compile that takes a minute). A cache load hides scipy.linalg from the probe
(the kernels use no linear algebra); it imports normally afterwards. With another Numba
whose cache loader is not the one this expects, the context is refreshed at start as
before, with the probe's import hidden.
"""

import sys
from contextlib import contextmanager

_started = False


@contextmanager
def _no_blas_probe():
    """Numba's linear algebra check imports scipy.linalg (0.2-0.3 s) when numba.np.arraymath
    is first imported; hide it for that import (when it is not loaded already)."""
    hide = "scipy.linalg" not in sys.modules
    if hide:
        sys.modules["scipy.linalg"] = None  # makes `import scipy.linalg...` fail fast
    try:
        yield
    finally:
        if hide and sys.modules.get("scipy.linalg", 0) is None:
            del sys.modules["scipy.linalg"]


def _load_overload_as_cached(self, sig, target_context):
    """numba.core.caching.Cache.load_overload without its target refresh: the machine code
    is loaded into the context's code generator, which exists already (start_numba_target).
    Its environments import the modules whose globals the kernel reads (numba.np.arraymath
    among them, which probes for BLAS)."""
    with _no_blas_probe(), self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)


def _skip_refresh_on_cache_load() -> bool:
    """Make cache loads skip the target refresh; False when this Numba's cache loader is not
    the one this replaces (then nothing is changed)."""
    from numba.core import caching

    cache = caching.Cache
    if cache.load_overload is _load_overload_as_cached:
        return True
    if not (
        hasattr(cache, "_load_overload") and hasattr(cache, "_guard_against_spurious_io_errors")
    ):
        return False
    cache.load_overload = _load_overload_as_cached
    return True


def start_numba_target() -> None:
    """Initialise Numba's CPU target once; call before the first kernel runs."""
    global _started
    if _started:
        return
    from numba.core.registry import cpu_target

    target_context = cpu_target.target_context  # the code generator and the C helpers
    if not _skip_refresh_on_cache_load():
        with _no_blas_probe():
            target_context.refresh()
    _started = True
    from vidur_fast.kernel_bundle import drop_stale_kernels, install_once

    drop_stale_kernels()  # cached kernels of other kernel sources (an upgrade, an edit)
    install_once()  # a first run: the shipped machine code of the default run's kernels
