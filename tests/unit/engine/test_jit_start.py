"""Kernels load from Numba's cache without the target refresh, and a cache miss still compiles."""

import textwrap

from tests.helpers.fresh_python import run_fresh_python

# A cached kernel module of its own (its cache lies beside it, in the test's directory). The
# kernel calls np.searchsorted, so its cached machine code has an environment in
# numba.np.arraymath, whose import probes for BLAS.
KERNEL = textwrap.dedent(
    """
    import numpy as np
    from numba import njit


    @njit(cache=True, nogil=True, _nrt=False)
    def place_nb(edges, x, out):
        for i in range(x.shape[0]):
            out[i] = np.searchsorted(edges, x[i]) + 0.5 * x[i]
        return out.shape[0]
    """
)

RUN = textwrap.dedent(
    """
    import sys

    import numpy as np

    from vidur_fast.jit_start import start_numba_target

    start_numba_target()
    import jit_start_kernel as k

    out = np.empty(4)
    n = k.place_nb(np.array([0.0, 1.0, 2.0]), np.array([0.5, 1.5, 2.5, -1.0]), out)
    hits = sum(k.place_nb.stats.cache_hits.values())
    print(n, out.tolist(), hits, "scipy.linalg" in sys.modules)
    """
)


def _run(tmp_path) -> str:
    return run_fresh_python(["-c", RUN], tmp_path, [str(tmp_path)])


def test_a_kernel_compiles_on_a_miss_and_loads_from_the_cache_after(tmp_path):
    (tmp_path / "jit_start_kernel.py").write_text(KERNEL)
    first = _run(tmp_path)
    second = _run(tmp_path)
    want = "4 [1.25, 2.75, 4.25, -0.5]"
    assert first.startswith(f"{want} 0 ")  # compiled (no cache hit)
    # loaded from the cache: same results, and the BLAS probe did not import scipy.linalg
    assert second == f"{want} 1 False"
