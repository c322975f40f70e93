"""Errors of the sweep and capacity commands (all print one line and exit 2 in the CLI)."""

from vidur_fast.errors import ConfigError, UserError


class SweepFileError(ConfigError):
    """The sweep file is malformed: unknown key, empty list, wrong type, missing SLO."""


class NotApplicable(ConfigError):
    """A grid path names a field that the union member chosen at this point does not have.

    Raised per point (the point is recorded with this error) rather than for the whole file.
    """


class ExecutorError(UserError):
    """The executor cannot start: ray missing, unreachable cluster address, bad worker count."""
