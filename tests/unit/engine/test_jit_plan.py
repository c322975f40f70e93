"""Callees compiled in worker processes are loaded by the caller's compile, and the recorded
plan matches the default run's loop."""

import pickle
import sys
import textwrap

import pytest
from vidur_fast.kernels import loop
from vidur_fast.kernels.codes import RouterPolicy, SchedPolicy

from tests.helpers.fresh_python import run_fresh_python
from vidur_fast.api import simulate
from vidur_fast.config.sim import SimConfig
from vidur_fast.config.workload import FixedLengths, SyntheticWorkload
from vidur_fast.engine import jit_plan
from vidur_fast.errors import UserError

# A caller kernel and two callees, in a module of their own (cached beside it).
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
    def total_nb(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += np.sqrt(x[i])
        return s


    @njit(cache=True, nogil=True, _nrt=False)
    def caller_nb(x, k):
        scale_nb(x, k)
        return total_nb(x)
    """
)

# Compiles caller_nb (recording which kernels this process compiled) and prints its result.
CALL = textwrap.dedent(
    """
    import numpy as np
    from numba.core import event

    import plan_kernels as k

    compiled = []


    class Listener(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__name__)


    event.register("numba:compile", Listener())
    x = np.arange(1.0, 6.0)
    print(repr(k.caller_nb(x, 2.5)), sorted(compiled))
    """
)


def _python(code: str, cwd, *args: str) -> str:
    return run_fresh_python(["-c", code, *args], cwd, [str(cwd), *sys.path])


def test_callees_compiled_in_workers_are_loaded_by_the_callers_compile(tmp_path):
    alone, pooled = tmp_path / "alone", tmp_path / "pooled"
    for d in (alone, pooled):
        d.mkdir()
        (d / "plan_kernels.py").write_text(KERNELS)
    # the reference: one process compiles the caller and both callees
    ref = _python(CALL, alone)
    assert ref.endswith("['caller_nb', 'scale_nb', 'total_nb']")
    # the callees compiled by two worker processes (as a run's plan does), then the caller
    precompile = textwrap.dedent(
        """
        import pickle
        from numba import types

        from vidur_fast.engine import jit_plan

        arr = types.Array(types.float64, 1, "C")
        sigs = {"scale_nb": (arr, types.float64), "total_nb": (arr,)}
        plan = jit_plan.VariantPlan((), 0.0, [
            jit_plan.Callee("plan_kernels", n, pickle.dumps(s), 0.1, 0) for n, s in sigs.items()
        ])
        notes = []
        # no `if __name__ == "__main__"`: the compile processes import nothing of this script
        print(jit_plan.precompile(plan, 2, notes.append), len(notes))
        """
    )
    (pooled / "precompile.py").write_text(precompile)
    out = run_fresh_python(["precompile.py"], pooled, [str(pooled), *sys.path])
    assert out == "2 2"  # two kernels, a note before and after
    got = _python(CALL, pooled)
    # same result, and this process compiled only the caller: both callees came from the cache
    assert got == ref.replace("['caller_nb', 'scale_nb', 'total_nb']", "['caller_nb']")


def test_one_worker_compiles_nothing_ahead():
    plan = jit_plan.VariantPlan((), 0.0, [])
    assert jit_plan.precompile(plan, 1, print) == 0


def test_compile_workers_reads_the_environment(monkeypatch):
    monkeypatch.setenv("VIDUR_FAST_COMPILE_WORKERS", "3")
    assert jit_plan.compile_workers() == 3
    monkeypatch.setenv("VIDUR_FAST_COMPILE_WORKERS", "two")
    with pytest.raises(UserError, match="VIDUR_FAST_COMPILE_WORKERS: must be a whole number"):
        jit_plan.compile_workers()
    monkeypatch.delenv("VIDUR_FAST_COMPILE_WORKERS")
    assert jit_plan.compile_workers() == min(jit_plan.cores(), jit_plan.MAX_WORKERS)


@pytest.mark.parametrize("policy", [SchedPolicy.VLLM_V1, SchedPolicy.SARATHI])
def test_the_plan_names_kernels_that_exist(policy):
    plan = jit_plan.load_plan((int(policy), False, False, False))
    assert plan is not None and len(plan.callees) > 20
    for c in plan.callees:
        d = jit_plan._dispatcher(c.module, c.qualname)
        assert hasattr(d, "compile") and isinstance(pickle.loads(c.sig), tuple)
        assert c.cpu_s >= 0


def test_the_default_runs_loop_has_the_recorded_argument_types(monkeypatch):
    # fails when the kernels' state changed: python -m vidur_fast.engine.jit_plan record
    seen = []
    real = loop.run_nb

    def spy(*args):
        seen.append(args)
        return real(*args)

    monkeypatch.setattr(loop, "run_nb", spy)
    simulate(SimConfig(workload=SyntheticWorkload(num_requests=3, lengths=FixedLengths(64, 4))))
    kernel = loop.loop_kernel(SchedPolicy.VLLM_V1, False, False, RouterPolicy.ROUND_ROBIN)
    plan = jit_plan.usable_plan(kernel, seen[0])
    assert plan is not None
    assert plan.loop_args == jit_plan.arg_types(seen[0])
