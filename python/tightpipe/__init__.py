"""tightpipe for Python users.

`tightpipe.cli` finds and runs the `tightpipe` binary; `tightpipe.schedule` reads the schedule files
it writes (`tightpipe schedule --format torch`, PyTorch's compute_comms CSV); `tightpipe.torch`
builds PyTorch's own pipelining runtime from them (docs/torch.md).
"""

from tightpipe.errors import (
    ArgumentError,
    ArgumentTypeError,
    BinaryNotFoundError,
    CliError,
    ScheduleFileError,
    ScheduleMismatchError,
    TightpipeError,
    UnsupportedActionError,
)

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "BinaryNotFoundError",
    "CliError",
    "ScheduleFileError",
    "ScheduleMismatchError",
    "TightpipeError",
    "UnsupportedActionError",
]
__version__ = "0.1.0"
