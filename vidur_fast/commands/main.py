"""`vidur-fast`: dispatch to a command (simulate is the default) and print user errors."""

import gc
import os
import sys

from vidur_fast.errors import UserError

COMMANDS = (
    "simulate",
    "profiles",
    "vidur-compat",
    "report",
    "sweep",
    "capacity",
    "validate",
)


def freeze_heap() -> None:
    """Put every object alive now out of the cyclic garbage collector's reach. The imports
    (pandas, numba, h5py, ...) leave over a million long-lived objects, and each full
    collection walks them all, several times at interpreter exit: 0.3-0.5 s of a 1-3 s run.
    Called after the imports and before exit; objects created later are collected as usual."""
    gc.freeze()


def _die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = "simulate"
    if argv and argv[0] in COMMANDS:
        cmd = argv.pop(0)
    elif argv and not argv[0].startswith("-") and ":" not in argv[0]:
        _die(f"unknown command {argv[0]!r}; commands: {', '.join(COMMANDS)}")
    try:
        if cmd == "simulate":
            from vidur_fast.commands.simulate import cmd_simulate

            return cmd_simulate(argv)
        if cmd in ("sweep", "capacity"):
            from vidur_fast.commands.sweep import main_capacity, main_sweep

            return (main_sweep if cmd == "sweep" else main_capacity)(argv)
        if cmd == "vidur-compat":
            from vidur_fast.commands.vidur_compat import main_compat

            return main_compat(argv)
        if cmd == "report":
            from vidur_fast.commands.report import main_report

            return main_report(argv)
        if cmd == "validate":
            from vidur_fast.commands.validate import cmd_validate

            return cmd_validate(argv)
        from vidur_fast.commands.profiles import cmd_profiles

        return cmd_profiles(argv)
    except UserError as exc:
        _die(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except MemoryError:
        _die("out of memory: the workload or cluster is too large for this machine")
    except BrokenPipeError:
        # the reader of stdout stopped (`| head`): nothing left to say, and nothing to flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("interrupted (no run directory written)", file=sys.stderr)
        return 130
    finally:
        freeze_heap()  # interpreter exit then skips walking everything once more
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
