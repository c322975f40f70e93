"""A compile plan recorded with another Numba, or with a blob that does not read back, is
ignored: the run compiles (or loads) its loop as without a plan, with the same outputs."""

import base64
import json
import zlib

import numpy as np
import pytest
from vidur_fast.kernels.codes import RouterPolicy, SchedPolicy

import vidur_fast.engine.run as engine_run
from tests.helpers.engine_harness import params, run
from vidur_fast.engine import jit_plan

KEY = (int(SchedPolicy.VLLM_V1), False, False, False)
# a pickle naming a type no Numba has: unpickling it raises
MISSING_TYPE = b"cnumba.core.types\nNoSuchNumbaType\n."


def _blob(raw: bytes) -> str:
    return base64.b64encode(zlib.compress(raw)).decode("ascii")


def _plan_text(edit) -> str:
    data = json.loads(jit_plan.PLAN_FILE.read_text())
    edit(data)
    return json.dumps(data)


def _other_numba(data):
    data["numba"] = "0.0.1"


def _bad_callees(data):
    for v in data["variants"].values():
        v["callees"] = _blob(MISSING_TYPE)


def _bad_loop_args(data):
    for v in data["variants"].values():
        v["loop_args"] = "not base64 of anything"


EDITS = [_other_numba, _bad_callees, _bad_loop_args]


def test_the_shipped_plan_reads_back():
    assert jit_plan.load_plan(KEY) is not None


@pytest.mark.parametrize("edit", EDITS, ids=lambda f: f.__name__)
def test_a_plan_that_does_not_fit_is_none(edit, tmp_path):
    path = tmp_path / "jit_plan.json"
    path.write_text(_plan_text(edit))
    assert jit_plan.load_plan(KEY, path) is None


def test_a_callee_whose_types_do_not_read_back_is_skipped():
    good = jit_plan.load_plan(KEY).callees[0]
    plan = jit_plan.VariantPlan((), 0.0, [good._replace(sig=MISSING_TYPE)])
    assert jit_plan.jobs_by_level(plan) == []
    assert jit_plan.compile_callees([(good.module, good.qualname, MISSING_TYPE)]) >= 0


@pytest.mark.parametrize("edit", EDITS, ids=lambda f: f.__name__)
def test_a_run_with_such_a_plan_runs_as_without_one(edit, tmp_path, monkeypatch):
    sp = params(SchedPolicy.SARATHI, n_replicas=2, router=RouterPolicy.LOR)
    arrivals, prompts, decodes = [0.0, 0.001, 0.002], [40, 8, 24], [3, 5, 2]
    ref = run(arrivals, prompts, decodes, sp).reqs
    path = tmp_path / "jit_plan.json"
    path.write_text(_plan_text(edit))
    monkeypatch.setattr(jit_plan, "PLAN_FILE", path)
    asked = []
    real_usable = engine_run.usable_plan

    def usable(kernel, args):
        asked.append(real_usable(kernel, args))
        return asked[-1]

    # as with an empty cache: the run asks for the plan before its loop's first call
    monkeypatch.setattr(engine_run, "kernel_cached", lambda dispatcher: False)
    monkeypatch.setattr(engine_run, "usable_plan", usable)
    got = run(arrivals, prompts, decodes, sp).reqs
    assert asked == [None]
    assert np.array_equal(got.done_ns, ref.done_ns) and np.array_equal(got.replica, ref.replica)
