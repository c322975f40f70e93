"""The loop's argument types do not depend on the request count: a run of one request uses
the loop compiled for longer runs (numpy calls a one-element view contiguous)."""

import numpy as np
from numba.core import event
from vidur_fast.kernels.codes import RouterPolicy, SchedPolicy
from vidur_fast.kernels.dtypes import NEVER
from vidur_fast.kernels.loop import loop_arg_types, loop_kernel
from vidur_fast.kernels.state import HOT_VIEWS

from tests.helpers.engine_harness import params, run
from vidur_fast.engine.jit_plan import arg_types
from vidur_fast.engine.state import alloc_reqs


def _reqs(n):
    return alloc_reqs(
        np.zeros(n, dtype=np.int64),
        np.full(n, 8),
        np.full(n, 2),
        np.full(n, -1),
        np.zeros(n + 1, dtype=np.int64),
    )


def test_the_strided_fields_are_the_hot_views():
    reqs = _reqs(2)
    (typed,) = arg_types((reqs,))
    strided = {f for f, t in zip(reqs._fields, typed.types, strict=True) if t.layout == "A"}
    assert strided == set(HOT_VIEWS)


def test_one_request_or_none_types_as_two():
    (two,) = arg_types((_reqs(2),))
    assert arg_types((_reqs(1),)) != (two,)  # what a plain call would compile for
    for n in (0, 1, 2, 5):
        assert loop_arg_types((_reqs(n), 3)) == (two, arg_types((3,))[0])


def test_a_one_request_run_after_a_two_request_run_compiles_nothing():
    sp = params(SchedPolicy.SARATHI, n_replicas=2, router=RouterPolicy.LOR)
    two = run([0.0, 0.001], [40, 8], [3, 5], sp).reqs
    kernel = loop_kernel(sp.policy, False, False, sp.router)
    before = len(kernel.overloads)
    compiled = []

    class Listener(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__qualname__)

    with event.install_listener("numba:compile", Listener()):
        one = run([0.0], [40], [3], sp).reqs
    assert compiled == [] and len(kernel.overloads) == before
    assert one.done_ns[0] != NEVER and (two.done_ns != NEVER).all()
