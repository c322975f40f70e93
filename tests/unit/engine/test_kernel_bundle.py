"""The shipped kernel bundle: built for the portable target, installed into an empty cache and
loaded without compiling; ignored when anything it was built from differs; and fresh."""

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

from vidur_fast import kernel_bundle
from vidur_fast.errors import UserError

KERNELS = textwrap.dedent(
    """
    import numpy as np
    from numba import njit


    @njit(cache=True, nogil=True, _nrt=False)
    def scale_nb(x, k):
        for i in range(x.shape[0]):
            x[i] = x[i] * k
        return x.shape[0]


    @njit(cache=True, nogil=True, _nrt=False)
    def caller_nb(x, k):
        scale_nb(x, k)
        s = 0.0
        for i in range(x.shape[0]):
            s += np.sqrt(x[i])
        return s
    """
)

# Installs the bundle given (if any), calls caller_nb and prints: entries installed, result,
# kernels this process compiled.
CALL = textwrap.dedent(
    """
    import sys
    import numpy as np
    from numba.core import event
    from pathlib import Path

    from vidur_fast import kernel_bundle

    installed = kernel_bundle.install(Path(sys.argv[1])) if len(sys.argv) > 1 else 0
    compiled = []


    class Listener(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__name__)


    event.register("numba:compile", Listener())
    from toy_kernels import k

    print(installed, repr(k.caller_nb(np.arange(1.0, 6.0), 2.5)), sorted(compiled))
    """
)


def _python(code: str, root, env: dict, *args) -> str:
    env = {**env, "PYTHONPATH": os.pathsep.join([str(root), *sys.path])}
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A package of two kernels, compiled for the portable target into a cache of its own and
    bundled (once per module); returns (its root, the bundle)."""
    base = tmp_path_factory.mktemp("bundle")
    pkg = base / "src" / "toy_kernels"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "k.py").write_text(KERNELS)
    cache = base / "built"
    out = _python(CALL, base / "src", kernel_bundle.portable_env(cache))
    assert out.endswith("['caller_nb', 'scale_nb']")
    sys.path.insert(0, str(base / "src"))
    try:
        settings = kernel_bundle.build_settings()
        meta = kernel_bundle.write_bundle(base / "bundle.zip", cache, ["toy_kernels"], settings)
    finally:
        sys.path.remove(str(base / "src"))
    assert meta["cpu"] == ["generic", ""]
    assert {ix["module"] for ix in meta["indexes"]} == {"toy_kernels.k"}
    return base


@pytest.fixture
def toy(built, tmp_path, monkeypatch):
    """A copy of the built package and its bundle: (its root, the bundle)."""
    shutil.copytree(built / "src", tmp_path / "src")
    shutil.copy(built / "bundle.zip", tmp_path / "bundle.zip")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    return tmp_path / "src", tmp_path / "bundle.zip"


def _fresh(tmp_path, name):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / name)}
    for var in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        env.pop(var, None)
    return env


def test_an_installed_bundle_is_loaded_without_compiling(toy, tmp_path):
    root, bundle = toy
    ref = _python(CALL, root, _fresh(tmp_path, "native"))
    assert ref.endswith("['caller_nb', 'scale_nb']")
    env = _fresh(tmp_path, "user")
    got = _python(CALL, root, env, bundle)
    # both kernels' entries copied, the same result, nothing compiled
    assert got == "2" + ref.removeprefix("0").replace("['caller_nb', 'scale_nb']", "[]")
    # a second run finds its cache filled and installs nothing
    assert _python(CALL, root, env, bundle).startswith("0 ")


def _rewrite_meta(bundle, change) -> None:
    with zipfile.ZipFile(bundle) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    meta = json.loads(members["meta.json"])
    change(meta)
    members["meta.json"] = json.dumps(meta).encode()
    with zipfile.ZipFile(bundle, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.update(numba="0.0.1"),
        lambda m: m.update(llvmlite="0.0.1"),
        lambda m: m.update(python="cpython-2.7"),
        lambda m: m.update(triple="aarch64-unknown-linux-gnu"),
        lambda m: m.update(cpu=["znver4", "+avx2"]),
        lambda m: m.update(opt="0"),
    ],
    ids=["numba", "llvmlite", "python", "triple", "cpu", "opt"],
)
def test_a_mismatched_bundle_is_ignored(toy, tmp_path, change):
    root, bundle = toy
    _rewrite_meta(bundle, change)
    assert _python(CALL, root, _fresh(tmp_path, "user"), bundle).endswith(
        "['caller_nb', 'scale_nb']"
    )


def test_a_bundle_of_edited_sources_is_ignored(toy, tmp_path):
    root, bundle = toy
    # another file of the package changed: the kernels may inline code from it
    (root / "toy_kernels" / "__init__.py").write_text("# edited\n")
    with zipfile.ZipFile(bundle) as zf:
        reason = kernel_bundle.why_unusable(json.loads(zf.read("meta.json")))
    assert reason == "kernel sources changed since it was built: toy_kernels.__init__.py"
    assert _python(CALL, root, _fresh(tmp_path, "user"), bundle).startswith("0 ")


def test_the_environment_turns_it_off(monkeypatch):
    monkeypatch.setenv("VIDUR_FAST_KERNEL_BUNDLE", "0")
    assert not kernel_bundle.enabled()
    monkeypatch.setenv("VIDUR_FAST_KERNEL_BUNDLE", "off")
    with pytest.raises(UserError, match="VIDUR_FAST_KERNEL_BUNDLE: must be 0 or 1"):
        kernel_bundle.enabled()


def test_the_shipped_bundle_is_of_these_kernels():
    # fails when a kernel file changed since the bundle was built:
    # python -m vidur_fast.kernel_bundle build
    if not kernel_bundle.BUNDLE_FILE.exists():
        pytest.skip("no kernel bundle in this checkout")
    with zipfile.ZipFile(kernel_bundle.BUNDLE_FILE) as zf:
        meta = json.loads(zf.read("meta.json"))
    assert meta["sources"] == kernel_bundle.source_hashes(kernel_bundle.PACKAGES)
    assert meta["indexes"][0]["index"].startswith("loop._loop_entry.locals.run_nb-")


def test_the_shipped_bundle_holds_one_loop_per_bundled_run():
    if not kernel_bundle.BUNDLE_FILE.exists():
        pytest.skip("no kernel bundle in this checkout")
    with zipfile.ZipFile(kernel_bundle.BUNDLE_FILE) as zf:
        keys = pickle.loads(zf.read("keys.pkl"))
    assert len(keys[0]) == len(kernel_bundle.BUNDLED_RUNS)  # the loop's index comes first


@pytest.mark.parametrize("run", kernel_bundle.BUNDLED_RUNS, ids=lambda a: " ".join(a) or "default")
def test_a_bundled_run_compiles_nothing_on_its_first_run(run, tmp_path):
    """With an empty Numba cache each bundled configuration loads its kernels from the
    bundle: nothing is compiled (a run whose loop is not bundled says it is compiling)."""
    if not kernel_bundle.BUNDLE_FILE.exists():
        pytest.skip("no kernel bundle in this checkout")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    env.pop("VIDUR_FAST_KERNEL_BUNDLE", None)
    args = [*run, "--workload.num-requests", "40"]
    cmd = [sys.executable, "-m", "vidur_fast", *args, "--output.dir", str(tmp_path / "out")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kernels loaded in" in done.stderr
    assert "compiling" not in done.stderr and "compiled the simulation loop" not in done.stderr
