"""User-facing error family: the CLI prints one line and exits with code 2."""


class UserError(Exception):
    """Bad user input; the message names the field or row and what is allowed."""


class ConfigError(UserError):
    pass


class TraceError(UserError):
    pass


class ProfileError(UserError):
    pass


class RunDirError(UserError):
    pass
