"""The package's errors: one base class, each message says what, the value, and a hint."""


class TightpipeError(Exception):
    """Base of every error this package raises."""


class ScheduleFileError(TightpipeError, ValueError):
    """A schedule file (CSV) that is damaged, truncated or refused by
    `tightpipe schedule --check`."""


class ScheduleMismatchError(TightpipeError, ValueError):
    """A schedule whose shape (ranks, stages, microbatches, placement) does not fit the
    PyTorch stages."""


class UnsupportedActionError(TightpipeError, ValueError):
    """A schedule holding an action that the installed PyTorch's runtime cannot run."""


class BinaryNotFoundError(TightpipeError, RuntimeError):
    """No `tightpipe` binary was found."""


class CliError(TightpipeError, RuntimeError):
    """The `tightpipe` binary refused its arguments or failed."""


class ArgumentError(TightpipeError, ValueError):
    """An argument of the Python API out of its range (checked before the binary runs)."""


class ArgumentTypeError(TightpipeError, TypeError):
    """An argument of the Python API of the wrong type (e.g. a float where an int is needed)."""
