"""Start Numba's CPU target without its BLAS probe.

When the target starts (the first kernel compiled or loaded from the cache), Numba checks for
BLAS by importing scipy.linalg: 0.2-0.3 s, a tenth of a warm run. The kernels use no linear
algebra, so that import is hidden for the probe alone (Numba then reports linear algebra as
unavailable in jitted code); scipy.linalg imports normally afterwards. If scipy.linalg is
already loaded (a timing fit ran first), the probe is free and nothing is hidden.
"""

import sys

_started = False


def start_numba_target() -> None:
    """Initialise Numba's CPU target once; call before the first kernel runs."""
    global _started
    if _started:
        return
    hide = "scipy.linalg" not in sys.modules
    if hide:
        sys.modules["scipy.linalg"] = None  # makes `import scipy.linalg...` fail fast
    try:
        from numba.core.registry import cpu_target

        cpu_target.target_context.refresh()
    finally:
        if hide and sys.modules.get("scipy.linalg", 0) is None:
            del sys.modules["scipy.linalg"]
    _started = True
