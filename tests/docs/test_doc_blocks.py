"""Every command block of the README and docs/*.md runs, and fails the test when it breaks.

Fenced `bash`/`sh`/`console` and `python` blocks are run from a scratch directory in which
`docs/`, `traces/`, `bench/` and `profiles/` are the repository's and `../shared` is the data
directory beside the repository (blocks that need it are skipped without it). HTML comments
directly above a block change how it runs, stated next to the block so a reader sees them:

    <!-- test: skip REASON -->             not run (a synopsis, an install, Ray, a long run)
    <!-- test: substitute OLD -> NEW -->   OLD (which must occur in the block) replaced by NEW
    <!-- test: setup COMMAND -->           a shell command run first (e.g. the run a block reads)
    <!-- test: needs shared -->            skipped when ../shared is not there
    <!-- test: expect TEXT -->              TEXT must appear in what the block prints
    <!-- test: creates PATH -->             the block must leave a non-empty file at PATH
"""

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO, SHARED

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = ("bash", "sh", "shell", "console")
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARK = re.compile(r"^<!--\s*test:\s*(.*?)\s*-->\s*$")
LINKED = ("docs", "traces", "bench", "profiles")
TIMEOUT_S = 300


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    code: str
    skip: str | None = None
    needs_shared: bool = False
    subs: list = field(default_factory=list)
    setup: list = field(default_factory=list)
    expect: list = field(default_factory=list)
    creates: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def read_blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    out, k = [], 0
    while k < len(lines):
        m = _FENCE.match(lines[k])
        if not m or not m.group(1):
            k += 1
            continue
        lang, start = m.group(1), k
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        block = Block(path, start + 1, lang, "\n".join(lines[start + 1 : end]) + "\n")
        j = start - 1
        while j >= 0 and _MARK.match(lines[j]):
            _apply_mark(block, _MARK.match(lines[j]).group(1))
            j -= 1
        if lang in SHELL or lang == "python":
            out.append(block)
        k = end + 1
    return out


def _apply_mark(block: Block, text: str) -> None:
    if text.startswith("skip"):
        block.skip = text[4:].strip() or "marked skip"
    elif text.startswith("substitute "):
        old, sep, new = text[len("substitute ") :].partition(" -> ")
        assert sep, f"{block.name}: substitute needs 'OLD -> NEW'"
        block.subs.append((old, new))
    elif text.startswith("setup "):
        block.setup.append(text[len("setup ") :])
    elif text.startswith("creates "):
        block.creates.append(text[len("creates ") :])
    elif text.startswith("expect "):
        block.expect.append(text[len("expect ") :])
    elif text == "needs shared":
        block.needs_shared = True
    else:
        raise AssertionError(f"{block.name}: unknown test marker {text!r}")


BLOCKS = [b for p in DOCS for b in read_blocks(p)]


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name in LINKED:
        (work / name).symlink_to(REPO / name)
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED)
    return work


def _run(argv: list[str], cwd: Path, what: str) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env["MPLBACKEND"] = "Agg"
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, f"{what} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def test_every_block_is_found_and_every_marker_is_known():
    assert len(BLOCKS) >= 10
    recipes = [b for b in BLOCKS if b.path.name == "recipes.md" and not b.skip]
    assert len(recipes) >= 3  # the three planner recipes run
    for b in BLOCKS:
        for old, _ in b.subs:
            assert old in b.code, f"{b.name}: substitute {old!r} does not occur in the block"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_doc_block_runs(block: Block, tmp_path):
    if block.skip:
        pytest.skip(block.skip)
    if block.needs_shared and not SHARED.is_dir():
        pytest.skip("../shared is not present")
    code = block.code
    for old, new in block.subs:
        code = code.replace(old, new)
    work = _workdir(tmp_path)
    for cmd in block.setup:
        _run(["bash", "-euo", "pipefail", "-c", cmd], work, f"{block.name} setup {cmd!r}")
    if block.lang == "python":
        script = work / "block.py"
        script.write_text(code)
        printed = _run([sys.executable, str(script)], work, block.name)
    else:
        printed = _run(["bash", "-euo", "pipefail", "-c", code], work, block.name)
    for rel in block.creates:
        made = work / rel
        assert made.is_file() and made.stat().st_size > 0, f"{block.name}: no {rel}"
    for text in block.expect:
        assert text in printed, f"{block.name}: {text!r} not in its output:\n{printed[-2000:]}"
