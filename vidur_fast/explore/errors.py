"""Errors of the sweep and capacity commands (all print one line and exit 2 in the CLI)."""

from vidur_fast.errors import ConfigError, UserError


class SweepFileError(ConfigError):
    """The sweep file is malformed: unknown key, empty list, wrong type, missing SLO."""


class ExecutorError(UserError):
    """The executor cannot start: ray missing, unreachable cluster address, bad worker count."""
