"""Drop cached kernels compiled from other kernel sources than the installed ones.

Numba keys a cached kernel by its own source file and bytecode only: a loop whose file did
not change keeps its cached machine code when a kernel it calls (and inlines or links) did.
After an upgrade that edits a callee but not the loop (pip leaves Numba's cache files behind),
or an edit in a checkout, that machine code would run the old callee against the new state
layout: wrong numbers, silently. The cache directory of the kernels therefore carries a stamp,
the hash of every kernel source file; when it differs from the installed sources (or is
absent), every cached kernel there is removed before the first one loads, and the stamp is
rewritten. The kernels then come from the shipped bundle or compile.
"""

import hashlib
import json
import os
from pathlib import Path

STAMP_NAME = "vidur_fast_kernel_sources.sha256"
CACHE_SUFFIXES = (".nbi", ".nbc")


def sources_digest(hashes: dict) -> str:
    """One hash over the per-file hashes of kernel_bundle.source_hashes."""
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()


def cache_dir_of(module: str) -> Path:
    """Numba's cache directory for the functions of `module` (here, per the host's locator)."""
    from vidur_fast.kernel_bundle import _host_cache

    return Path(_host_cache(module).cache_path)


def drop_stale(cache_dir: Path, digest: str) -> int:
    """Remove every cached kernel in cache_dir unless its stamp is `digest`; stamp it. Returns
    how many files were removed. An unwritable directory is left as it is (Numba then caches
    nothing there either)."""
    stamp = cache_dir / STAMP_NAME
    try:
        if stamp.read_text().strip() == digest:
            return 0
    except OSError:
        pass
    if not cache_dir.is_dir():
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            return 0
    removed = 0
    for path in cache_dir.iterdir():
        if path.suffix in CACHE_SUFFIXES:
            try:
                path.unlink()
                removed += 1
            except FileNotFoundError:
                pass  # another process removed it first
            except OSError:
                return removed
    tmp = stamp.with_name(f"{STAMP_NAME}.{os.getpid()}.tmp")
    try:
        tmp.write_text(digest + "\n")
        os.replace(tmp, stamp)
    except OSError:
        tmp.unlink(missing_ok=True)
    return removed


def drop_stale_kernels(packages=None, probe: str = "loop") -> int:
    """drop_stale for the kernel packages (the simulator's by default), whose cache directory is
    that of their module `probe`; any failure leaves the cache as it is."""
    from vidur_fast.kernel_bundle import PACKAGES, source_hashes

    packages = PACKAGES if packages is None else packages
    try:
        digest = sources_digest(source_hashes(packages))
        return sum(drop_stale(cache_dir_of(f"{p}.{probe}"), digest) for p in packages)
    except Exception:  # a Numba whose cache internals differ: leave its cache to it
        return 0
