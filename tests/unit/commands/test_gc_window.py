"""`vidur-fast simulate` and `vidur-fast vidur-compat` turn the cyclic garbage collector off
for their imports only: whichever way the command ends, it is on again afterwards, with the
objects alive at that point frozen (out of its reach)."""

import gc

import pytest

from tests.helpers.cli_args import FAST_TIMING_ARGS
from vidur_fast.commands import main as cli


@pytest.fixture
def collector():
    """The collector on before the test and after it, whatever the test left."""
    gc.enable()
    yield
    gc.unfreeze()
    gc.enable()


def _watch(monkeypatch) -> list[bool]:
    """Whether the collector was on each time freeze_heap ran."""
    seen: list[bool] = []
    real = cli.freeze_heap

    def watched() -> None:
        seen.append(gc.isenabled())
        real()

    monkeypatch.setattr(cli, "freeze_heap", watched)
    return seen


def test_off_for_the_imports_of_a_run_and_on_after_it(tmp_path, monkeypatch, collector):
    seen = _watch(monkeypatch)
    import vidur_fast.commands.simulate as sim

    monkeypatch.setattr(sim, "freeze_heap", cli.freeze_heap)
    args = ["--output.dir", str(tmp_path / "run"), *FAST_TIMING_ARGS, "--quiet"]
    assert cli.main([*args, "workload:synthetic", "--workload.num-requests", "20"]) == 0
    assert seen[0] is False  # the run's own freeze_heap, the collector still off
    assert gc.isenabled()


@pytest.mark.parametrize(
    "argv",
    [
        ["--cluster.tp", "3"],  # bad input: exit 2 before the run
        ["--preset", "list"],  # returns before any freeze_heap of its own
        ["vidur-compat", "--help"],
    ],
)
def test_on_again_however_the_command_ends(argv, capsys, collector):
    try:
        cli.main(argv)
    except SystemExit as exc:
        assert exc.code == 2
    assert gc.isenabled()
