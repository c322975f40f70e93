"""The package reads top to bottom: each stage imports only the stages below it.

Every import of the package (module level or inside a function) is checked against the stage
order of docs/architecture.md; kernels import only numpy, numba and sibling kernels.
"""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "vidur_fast"
KERNELS = REPO / "kernels"

# stage -> rank; a module may import a lower rank or its own stage, never a higher rank or
# another stage of the same rank
RANK = {
    "errors": 0,
    "kernels": 0,
    "numerics": 0,
    "profiles": 0,
    "catalog": 1,
    "kernel_bundle": 1,  # imports errors; jit_start installs it
    "config": 2,
    "jit_start": 2,
    "workload": 3,
    "timing": 3,
    "params": 4,
    "engine": 5,
    "metrics": 6,
    "outputs": 7,
    "api": 8,
    "explore": 9,
    "validation": 9,
    "commands": 10,
    "__main__": 11,
}
MAX_TOP_LEVEL_MODULES = 6


def _stage(module: str) -> str | None:
    """vidur_fast.config.sim -> 'config'; None for the package root itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module, [a.name for a in node.names]))
    return out


def _package_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_stages_import_only_downwards():
    bad = []
    for path in _package_modules():
        rel = path.relative_to(PACKAGE)
        here = rel.parts[0].removesuffix(".py")
        if here == "__init__":
            continue  # the root only names its lazy exports
        assert here in RANK, f"{rel}: a stage missing from the order in this test"
        for line, module, names in _imports(path):
            if not module.startswith("vidur_fast"):
                continue
            there = _stage(module)
            if there is None:
                if names != ["__version__"]:
                    bad.append(f"{rel}:{line} imports the package root ({names})")
                continue
            if there == here:
                continue
            if RANK[there] >= RANK[here]:
                bad.append(f"{rel}:{line} ({here}) imports {module} ({there})")
    assert not bad, "imports against the stage order:\n" + "\n".join(bad)


@pytest.mark.parametrize("path", sorted(KERNELS.glob("*.py")), ids=lambda p: p.name)
def test_kernels_import_only_numpy_numba_and_kernels(path):
    # llvmlite: the intrinsic of the prefetch hint is written in LLVM IR
    allowed = ("numpy", "numba", "llvmlite", "vidur_fast", "math", "enum", "typing", "collections")
    for line, module, _ in _imports(path):
        assert module.split(".")[0] in {a.split(".")[0] for a in allowed}, (path.name, line)
        if module.startswith("vidur_fast"):
            assert module.startswith("vidur_fast.kernels"), f"{path.name}:{line} {module}"


def test_few_loose_modules_at_the_top():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_TOP_LEVEL_MODULES, loose


def test_tests_share_code_only_through_helpers():
    """A test module imports tests.helpers, tests.reference (the oracle) or tests.conftest,
    never another test folder's modules."""
    shared = ("tests.helpers", "tests.reference", "tests.conftest")
    bad = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for line, module, _ in _imports(path):
            if module.startswith("tests") and not module.startswith(shared):
                bad.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    assert not bad, "\n".join(bad)


def test_every_package_folder_is_installed():
    """pyproject.toml lists every folder of the package (a missing one is left out of a
    wheel while an editable install still finds it)."""
    import tomllib

    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in PACKAGE.rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert folders <= listed, sorted(folders - listed)
    assert {"vidur_fast.kernels", "vidur_fast.profiles"} <= listed
