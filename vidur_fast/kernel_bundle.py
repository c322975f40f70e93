"""Shipped machine code of the common runs' kernels, copied into Numba's cache on a first run.

A first run otherwise compiles its kernels: the callees in parallel (engine/jit_plan.py),
then the simulation loop itself, ~30 CPU-s of LLVM in one thread. `python -m
vidur_fast.kernel_bundle build` runs the BUNDLED_RUNS in fresh processes with an empty Numba
cache for the portable CPU target of this machine's triple (NUMBA_CPU_NAME=generic, no
CPU features: code that runs on any CPU of that triple) and writes every cache entry it made
into kernel_bundle.zip: the entries' machine code (Numba's .nbc files, as written), their
index keys without the CPU part, and what they were built with.

Numba keys an entry by the kernel's argument types, the target (triple, CPU name, CPU
features) and hashes of the kernel's bytecode and closure, in an index per kernel stamped
with its Numba version and its source file's content hash; the cache directory depends on
where the source file is. The directory and the CPU part do not carry over to another
machine, so on a first run (the host's cache lacks the bundle's first entry) install()
writes the entries into the host's own cache directories, each index stamped by this
Numba for the host's source file and each key under the host's target. It does so only when
everything the code depends on matches: the versions of Numba, llvmlite and Python, the
triple, Numba's optimisation settings, and the content of every Python file beside each
bundled kernel (a kernel inlines code of other files of its package, which Numba's cache
does not notice). Otherwise the bundle is ignored and the kernels compile as without it.
Entries the host has already are kept; Numba itself still checks each entry's bytecode hash
when it loads it.

VIDUR_FAST_KERNEL_BUNDLE=0 turns it off (every kernel compiles for this CPU, as without it).
Before either, drop_stale_kernels() clears the host's cached kernels when they were compiled
from other kernel sources (below).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import pickle
import sys
import zipfile
from pathlib import Path

from vidur_fast.errors import UserError

BUNDLE_FILE = Path(__file__).with_name("kernel_bundle.zip")
FORMAT = 1
# the packages whose kernels are bundled: every Python file in them is hashed
PACKAGES = ("vidur_fast.kernels",)
PORTABLE_CPU = ("generic", "")  # NUMBA_CPU_NAME, NUMBA_CPU_FEATURES of the build

_installed = False


def enabled() -> bool:
    """VIDUR_FAST_KERNEL_BUNDLE: unset or 1 uses the bundle, 0 does not."""
    text = os.environ.get("VIDUR_FAST_KERNEL_BUNDLE", "").strip()
    if text not in ("", "0", "1"):
        raise UserError(f"VIDUR_FAST_KERNEL_BUNDLE: must be 0 or 1 (got {text!r})")
    return text != "0"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _source_dir(root: str) -> tuple[Path, str]:
    """The directory of package (or top-level module) `root`, and the prefix of the module
    names of its files."""
    spec = importlib.util.find_spec(root)
    origin = Path(spec.origin)
    if origin.name == "__init__.py":
        return origin.parent, root + "."
    return origin.parent, ""


def source_hashes(roots) -> dict[str, dict[str, str]]:
    """Per root, the content hash of every Python file in its directory."""
    out = {}
    for root in roots:
        folder, _ = _source_dir(root)
        out[root] = {p.name: _sha256(p) for p in sorted(folder.glob("*.py"))}
    return out


def build_settings() -> dict:
    """What a bundle's machine code depends on besides the kernels' sources and the CPU."""
    import llvmlite
    import numba
    from numba.core import config
    from numba.core.registry import cpu_target

    return {
        "format": FORMAT,
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "python": f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}"
        + getattr(sys, "abiflags", ""),
        "triple": cpu_target.target_context.codegen().magic_tuple()[0],
        "opt": str(config.OPT),
        "boundscheck": str(config.BOUNDSCHECK),
        "debuginfo": str(config.DEBUGINFO_DEFAULT),
    }


def why_unusable(meta: dict) -> str | None:
    """Why a bundle with metadata `meta` cannot be used here (None: it can)."""
    here = build_settings()
    for name, value in here.items():
        if meta.get(name) != value:
            return f"built with {name} {meta.get(name)!r}, here {value!r}"
    if tuple(meta.get("cpu", ())) != PORTABLE_CPU:
        return f"built for CPU {meta.get('cpu')!r}, not the portable target"
    try:
        hashes = source_hashes(meta["sources"])
    except Exception:  # a package of the bundle is gone
        return "a bundled package is missing"
    if hashes != meta["sources"]:
        changed = sorted(
            f"{root}.{name}"
            for root, files in meta["sources"].items()
            for name in set(files) | set(hashes.get(root, {}))
            if files.get(name) != hashes.get(root, {}).get(name)
        )
        return "kernel sources changed since it was built: " + ", ".join(changed)
    return None


def _host_cache(module: str):
    """Numba's cache object for a function of `module` (its cache directory and its index
    stamp for the host's source file)."""
    from numba.core.caching import FunctionCache
    from numba.core.dispatcher import Dispatcher

    mod = importlib.import_module(module)
    for value in vars(mod).values():
        func = value.py_func if isinstance(value, Dispatcher) else value
        if getattr(func, "__module__", None) == module and hasattr(func, "__code__"):
            return FunctionCache(func)
    raise LookupError(f"no function in {module}")


def _index_file(module: str, index_name: str):
    from numba.core.caching import IndexDataCacheFile

    cache = _host_cache(module)
    stamp = cache._cache_file._source_stamp
    return IndexDataCacheFile(cache.cache_path, index_name[: -len(".nbi")], stamp)


def _has_entries(module: str, index_name: str, keys, magic) -> bool:
    index = _index_file(module, index_name)._load_index()
    return all((sig, magic, code) in index for sig, code, _ in keys)


def _install_index(zf: zipfile.ZipFile, module: str, index_name: str, keys, magic) -> int:
    """Add the bundled entries of one kernel's index that the host's index lacks."""
    index_file = _index_file(module, index_name)
    overloads = index_file._load_index()  # {} when absent, stale or of another Numba
    taken = set(overloads.values())
    added = 0
    number = 1
    for sig, code, member in keys:
        key = (sig, magic, code)
        if key in overloads:
            continue
        while index_file._data_name(number) in taken:
            number += 1
        name = index_file._data_name(number)
        taken.add(name)
        with index_file._open_for_write(index_file._data_path(name)) as f:
            f.write(zf.read(member))
        overloads[key] = name
        added += 1
    if added:
        index_file._save_index(overloads)
    return added


def install(path: Path = BUNDLE_FILE) -> int:
    """Copy the bundle's entries into Numba's cache when it matches this host and the host's
    cache lacks them; returns how many entries were written (0: no bundle, not usable here,
    or installed already). Call after the CPU target is started."""
    if not path.exists():
        return 0
    from numba.core.registry import cpu_target

    magic = cpu_target.target_context.codegen().magic_tuple()
    with zipfile.ZipFile(path) as zf:
        meta = json.loads(zf.read("meta.json"))
        if meta.get("triple") != magic[0] or why_unusable(meta) is not None:
            return 0
        indexes = meta["indexes"]
        keys = pickle.loads(zf.read("keys.pkl"))  # per index: (sig, code hashes, member)
        first = indexes[0]
        if _has_entries(first["module"], first["index"], keys[0], magic):
            return 0  # not a first run: installed already, or compiled here
        return sum(
            _install_index(zf, ix["module"], ix["index"], k, magic)
            for ix, k in zip(indexes, keys, strict=True)
        )


def install_once() -> None:
    """install() once per process, when enabled; any failure leaves the cache to Numba (the
    kernels then compile as without a bundle)."""
    global _installed
    if _installed or not enabled():
        return
    _installed = True
    try:
        install()
    except Exception:  # an unreadable bundle or another Numba's internals: compile instead
        pass


# ---- the host cache: cached kernels of other sources ----
#
# Drop cached kernels compiled from other kernel sources than the installed ones.
#
# Numba keys a cached kernel by its own source file and bytecode only: a loop whose file did
# not change keeps its cached machine code when a kernel it calls (and inlines or links) did.
# After an upgrade that edits a callee but not the loop (pip leaves Numba's cache files behind),
# or an edit in a checkout, that machine code would run the old callee against the new state
# layout: wrong numbers, silently. The cache directory of the kernels therefore carries a stamp,
# the hash of every kernel source file; when it differs from the installed sources (or is
# absent), every cached kernel there is removed before the first one loads, and the stamp is
# rewritten. The kernels then come from the shipped bundle or compile.


STAMP_NAME = "vidur_fast_kernel_sources.sha256"
CACHE_SUFFIXES = (".nbi", ".nbc")


def sources_digest(hashes: dict) -> str:
    """One hash over the per-file hashes of kernel_bundle.source_hashes."""
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()


def cache_dir_of(module: str) -> Path:
    """Numba's cache directory for the functions of `module` (here, per the host's locator)."""
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
    packages = PACKAGES if packages is None else packages
    try:
        digest = sources_digest(source_hashes(packages))
        return sum(drop_stale(cache_dir_of(f"{p}.{probe}"), digest) for p in packages)
    except Exception:  # a Numba whose cache internals differ: leave its cache to it
        return 0


# ---- building (python -m vidur_fast.kernel_bundle build) ----

# The runs whose kernels are bundled, as `vidur-fast` arguments, one loop variant each
# (kernels/loop.py loop_kernel): the default run (vllm_v1, round robin), Sarathi (Vidur's
# default scheduler, so also vidur-compat's first run) and vllm_v1 behind a router that reads
# the prefix caches (which needs prompts with block hashes: a pool of repeated prompts). Other
# variants compile their loop on first use, linking the bundled callees.
BUNDLED_RUNS = (
    (),
    ("scheduler:sarathi",),
    ("router:prefix_aware", "workload:closed_loop", "--workload.prompt-pool", "5"),
)


def _entries_of(cache_dir: Path, roots) -> list[tuple[str, str, list]]:
    """Every index in a Numba cache directory, as (module, index file name, [(sig, code
    hashes, data bytes)]): the kernels of `roots` only, all for the portable CPU target."""
    import numba
    from numba.core.caching import _CacheLocator

    owner = {}  # (cache subdirectory, module file stem) -> module name
    for root in roots:
        folder, prefix = _source_dir(root)
        for p in folder.glob("*.py"):
            owner[(_CacheLocator.get_suitable_cache_subpath(str(p)), p.stem)] = prefix + p.stem
    out = []
    for index_path in sorted(cache_dir.glob("*/*.nbi")):
        stem = index_path.name.split(".")[0]
        module = owner.get((index_path.parent.name, stem))
        if module is None:
            sys.exit(f"a cached kernel outside {', '.join(roots)}: {index_path.name}")
        with open(index_path, "rb") as f:
            if pickle.load(f) != numba.__version__:
                sys.exit(f"{index_path.name}: written by another Numba")
            _, overloads = pickle.loads(f.read())
        entries = []
        for (sig, magic, code), data_name in overloads.items():
            if tuple(magic[1:]) != PORTABLE_CPU:
                sys.exit(f"{index_path.name}: an entry for CPU {magic[1:]}")
            entries.append((sig, code, (index_path.parent / data_name).read_bytes()))
        out.append((module, index_path.name, entries))
    # the largest index first: install() reads the first to tell a first run (the loop)
    return sorted(out, key=lambda e: -sum(len(d) for _, _, d in e[2]))


def write_bundle(path: Path, cache_dir: Path, roots, settings: dict) -> dict:
    """Write the bundle of the entries in Numba cache directory `cache_dir`; returns its
    metadata."""
    from numba.core.serialize import dumps

    entries = _entries_of(cache_dir, roots)
    meta = {
        **settings,
        "cpu": list(PORTABLE_CPU),
        "sources": source_hashes(roots),
        "indexes": [{"module": m, "index": name} for m, name, _ in entries],
    }
    keys = []
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("meta.json", json.dumps(meta, indent=1) + "\n")
        for i, (_, _, items) in enumerate(entries):
            ks = []
            for j, (sig, code, data) in enumerate(items):
                member = f"entries/{i:03d}-{j:02d}.nbc"
                zf.writestr(member, data)
                ks.append((sig, code, member))
            keys.append(ks)
        zf.writestr("keys.pkl", dumps(keys))
    tmp.replace(path)
    return meta


def portable_env(cache_dir: Path) -> dict:
    """The environment of a process that compiles for the portable target into cache_dir."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), "VIDUR_FAST_KERNEL_BUNDLE": "0"}
    env["NUMBA_CPU_NAME"], env["NUMBA_CPU_FEATURES"] = PORTABLE_CPU
    return env


def build(path: Path = BUNDLE_FILE) -> None:
    """Compile the BUNDLED_RUNS for the portable target with an empty Numba cache and write
    the bundle of what it cached (a few CPU minutes)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="vidur-fast-kernel-bundle-") as tmp:
        cache = Path(tmp) / "numba"
        for i, args in enumerate(BUNDLED_RUNS):
            out = ["--quiet", "--output.dir", str(Path(tmp) / f"out{i}")]
            cmd = [sys.executable, "-m", "vidur_fast", *args, *out]
            if subprocess.run(cmd, env=portable_env(cache)).returncode != 0:
                sys.exit(f"compiling the bundled run {' '.join(args) or '(default)'} failed")
        meta = write_bundle(path, cache, PACKAGES, build_settings())
    n = len(meta["indexes"])
    print(f"{path.name}: {n} kernels, {path.stat().st_size / 1e6:.1f} MB", file=sys.stderr)


def main(argv: list[str]) -> None:
    if argv == ["build"]:
        build()
    elif argv == ["check"]:
        if not BUNDLE_FILE.exists():
            sys.exit("no kernel bundle")
        with zipfile.ZipFile(BUNDLE_FILE) as zf:
            reason = why_unusable(json.loads(zf.read("meta.json")))
        print(reason or "the kernel bundle is usable here")
        sys.exit(1 if reason else 0)
    else:
        sys.exit("usage: python -m vidur_fast.kernel_bundle build|check")


if __name__ == "__main__":
    main(sys.argv[1:])
