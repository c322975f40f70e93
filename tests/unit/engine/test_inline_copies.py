"""Numba's inliner copies a callee's IR once per block, each copy with the whole scope; with
vidur_fast.jit_start's shared copies the same kernels compile to the same results with a
fraction of the copying (a loop variant's compile went from ~65 to ~20 s)."""

import json
import subprocess
import sys

_TOY = """
import json, sys
import numpy as np
from numba import njit
from numba.core import ir

copies = [0]
plain = ir.Var.__deepcopy__
def counted(self, memo):
    copies[0] += 1
    return plain(self, memo)
ir.Var.__deepcopy__ = counted

if sys.argv[1] == "shared":
    from vidur_fast.jit_start import _share_copies_while_inlining
    assert _share_copies_while_inlining()

@njit(inline="always")
def leaf(a, i):
    s = 0.0
    for j in range(i):
        if a[j] > 0.25:
            s += a[j] * j
        elif a[j] < -0.5:
            s -= a[j] * 0.5
        else:
            s += 1.0 / (1.0 + a[j] * a[j])
    return s

@njit(inline="always")
def middle(a, n):
    t = 0.0
    for i in range(n):
        if i % 3 == 0:
            t += leaf(a, i)
        else:
            t -= leaf(a, n - i) * 0.75
    return t

@njit
def top(a, n):
    return middle(a, n) + middle(a, n // 2) - leaf(a, 5)

a = np.sin(np.arange(64) * 0.37)
out = [top(a, n).hex() for n in (0, 1, 7, 64)]
print(json.dumps([out, copies[0]]))
"""


def _compile(mode: str) -> tuple[list, int]:
    done = subprocess.run(
        [sys.executable, "-c", _TOY, mode], capture_output=True, text=True, check=True
    )
    values, copies = json.loads(done.stdout.strip().splitlines()[-1])
    return values, copies


def test_shared_copies_compile_the_same_kernels_with_less_copying():
    plain_values, plain_copies = _compile("plain")
    shared_values, shared_copies = _compile("shared")
    assert shared_values == plain_values
    assert shared_copies * 2 < plain_copies, (shared_copies, plain_copies)


def test_installed_once_and_only_into_the_inliner_it_expects():
    from numba.core import inline_closurecall as inliner

    from vidur_fast.jit_start import _share_copies_while_inlining

    assert _share_copies_while_inlining()
    patched = inliner.InlineWorker.inline_ir
    assert patched.shares_copies
    assert _share_copies_while_inlining()  # a second call changes nothing
    assert inliner.InlineWorker.inline_ir is patched
    # outside an inlining the stand-in is copy.deepcopy itself
    assert inliner.copy.deepcopy([1, [2]]) == [1, [2]]
