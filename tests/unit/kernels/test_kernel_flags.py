"""Every kernel is compiled without reference counting.

The state bundles are NamedTuples of ~30 arrays; with Numba's reference counting on, every
call between kernels increments and decrements each member (atomics), which made the loop
about 10x slower. Kernels never allocate, so they do not need it.
"""

import importlib
import pkgutil

import vidur_fast.kernels as kernels_pkg
from numba.core.registry import CPUDispatcher
from vidur_fast.kernels import loop
from vidur_fast.kernels.codes import RouterPolicy, SchedPolicy


def _dispatchers():
    for info in pkgutil.iter_modules(kernels_pkg.__path__):
        mod = importlib.import_module(f"vidur_fast.kernels.{info.name}")
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher) and obj.__module__ == mod.__name__:
                yield f"{mod.__name__}.{name}", obj


def test_kernels_are_compiled_without_refcounting():
    found = dict(_dispatchers())
    assert "vidur_fast.kernels.loop._run_loop_nb" in found
    for policy in SchedPolicy:  # the compiled loops (kernels/loop.py loop_kernel)
        for pools_on, pd_on in ((False, False), (True, False), (True, True)):
            for router in RouterPolicy:
                kernel = loop.loop_kernel(policy, pools_on, pd_on, router)
                found[f"loop_kernel({policy.name}, {pools_on}, {pd_on}, {router.name})"] = kernel
    missing = [n for n, d in found.items() if d.targetoptions.get("_nrt", True) is not False]
    assert not missing, f"use @njit(cache=True, nogil=True, _nrt=False) for: {missing}"
