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

Compiling is made cheaper too (`_share_copies_while_inlining`): most of a loop variant's
compile time went into copying Numba IR for `inline="always"` (docs/performance.md,
"Copying IR while inlining").
"""

import copy
import functools
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


class _InlineCopies:
    """Stands in for the `copy` module inside numba.core.inline_closurecall.

    To inline a kernel Numba copies the callee's IR twice, one block at a time, each with a
    deepcopy of its own. A block's variables point to the function's scope, which holds every
    variable of the function, so each block's copy copies the whole scope again: the work is
    blocks x variables per inlined call, and for the loop's nested inlined kernels it was
    ~60 % of a variant's compile (8M variables copied for 142 inlined calls). Here the blocks
    of one scope share one memo while one call is inlined: one copy of the scope and of each
    variable, shared by the copied blocks as the originals share them (what one deepcopy of
    the whole block map gives). Outside an inlining, and for anything without a scope, it is
    copy.deepcopy itself."""

    def __init__(self):
        self.memos: dict | None = None  # id(scope) -> deepcopy memo, during one inline_ir

    def deepcopy(self, x, memo=None):
        scope = getattr(x, "scope", None)
        if memo is not None or self.memos is None or scope is None:
            return copy.deepcopy(x, memo)
        # the memo keeps the scope alive, so its id is not reused while the memo lives
        return copy.deepcopy(x, self.memos.setdefault(id(scope), {}))

    def __getattr__(self, name):
        return getattr(copy, name)


_INLINE_COPIES = _InlineCopies()


def _sharing_copies(inline_ir):
    """InlineWorker.inline_ir with one memo per scope for the IR copies of that call."""

    @functools.wraps(inline_ir)
    def inline_ir_sharing_copies(self, *args, **kwargs):
        outer, _INLINE_COPIES.memos = _INLINE_COPIES.memos, {}
        try:
            return inline_ir(self, *args, **kwargs)
        finally:
            _INLINE_COPIES.memos = outer

    inline_ir_sharing_copies.shares_copies = True
    return inline_ir_sharing_copies


def _share_copies_while_inlining() -> bool:
    """Install _InlineCopies in Numba's inliner; False (nothing changed) when this Numba's
    inliner is not the one it expects (no InlineWorker.inline_ir, or its module's `copy` is
    not the copy module)."""
    from numba.core import inline_closurecall as inliner

    worker = getattr(inliner, "InlineWorker", None)
    inline_ir = getattr(worker, "inline_ir", None)
    if inline_ir is None:
        return False
    if getattr(inline_ir, "shares_copies", False):
        return True
    if getattr(inliner, "copy", None) is not copy:
        return False
    inliner.copy = _INLINE_COPIES
    worker.inline_ir = _sharing_copies(inline_ir)
    return True


def _share_copies_at_first_compile() -> None:
    """Install _InlineCopies when Numba starts its first compile (importing the inliner costs
    ~50 ms, which a run whose kernels all come from the cache does not pay)."""
    from numba.core import event

    class FirstCompile(event.Listener):
        installed = False

        def on_start(self, _event):
            if not self.installed:
                _share_copies_while_inlining()
                self.installed = True

        def on_end(self, _event):
            pass

    event.register("numba:compile", FirstCompile())


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
    if "numba.core.inline_closurecall" in sys.modules:
        _share_copies_while_inlining()
    else:
        _share_copies_at_first_compile()
    _started = True
    from vidur_fast.kernel_bundle import drop_stale_kernels, install_once

    drop_stale_kernels()  # cached kernels of other kernel sources (an upgrade, an edit)
    install_once()  # a first run: the shipped machine code of the default run's kernels
