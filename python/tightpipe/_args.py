"""Checks of the Python API's own arguments, in Python terms, before the binary or PyTorch runs.

Each check returns the value (normalised where that helps: a path as str) or raises, in one line
in the style of the C++ side, "<argument> <value>: <what is wrong>; hint: <fix>":
ArgumentTypeError (a TypeError) for the wrong type, ArgumentError (a ValueError) for a value out
of its range. The limits are the binary's (include/tightpipe/schedule.h; tests/test_api_args.py
holds them equal).
"""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Any

from tightpipe.errors import ArgumentError, ArgumentTypeError, BinaryNotFoundError

MAX_RANKS = 1024  # p: kMaxRanks
MAX_CHUNKS = 64  # v, virtual stages per rank: kMaxChunks
MAX_STAGES = 8192  # S = p x v: kMaxStages
MAX_MICROBATCHES = 65536  # m: kMaxMicrobatches
MIN_MEMORY_LIMIT = 1.0  # zb-auto's --memory-limit: kZbAutoMinMemoryLimit (auto_schedule.h)


def show(value: Any) -> str:
    """The value as the messages show it: numbers as written, anything else as its repr, cut
    to 60 characters."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return str(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(value: Any) -> str:
    return type(value).__name__


def count(name: str, value: Any, lo: int, hi: int, hint: str) -> int:
    """An int (not a bool; numpy's ints count: numbers.Integral) in [lo, hi]; returned as int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(
            f"{name} {show(value)}: must be an int in [{lo}, {hi}], not {_type_name(value)}; "
            f"hint: {hint}"
        )
    v = int(value)
    if not lo <= v <= hi:
        raise ArgumentError(f"{name} {v}: must be in [{lo}, {hi}]; hint: {hint}")
    return v


def number(name: str, value: Any, lo: float, hi: float, hint: str) -> float:
    """A finite real number (not a bool) in [lo, hi] (hi may be math.inf); returned as float."""
    span = f"a finite number >= {lo:g}" if math.isinf(hi) else f"a number in [{lo:g}, {hi:g}]"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(
            f"{name} {show(value)}: must be {span}, not {_type_name(value)}; hint: {hint}"
        )
    v = float(value)
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ArgumentError(f"{name} {show(value)}: must be {span}; hint: {hint}")
    return v


def positive_seconds(name: str, value: Any, hint: str) -> float:
    """A finite number of seconds above 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(
            f"{name} {show(value)}: must be a number of seconds > 0, not {_type_name(value)}; "
            f"hint: {hint}"
        )
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ArgumentError(
            f"{name} {show(value)}: must be a finite number of seconds > 0; hint: {hint}"
        )
    return v


def flag(name: str, value: Any, hint: str) -> bool:
    """A bool."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(
            f"{name} {show(value)}: must be True or False, not {_type_name(value)}; hint: {hint}"
        )
    return value


def word(name: str, value: Any, hint: str) -> str:
    """A non-empty str that the binary cannot mistake for a flag (no leading '-')."""
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f"{name} {show(value)}: must be a str, not {_type_name(value)}; hint: {hint}"
        )
    if not value.strip():
        raise ArgumentError(f"{name} {show(value)}: is empty; hint: {hint}")
    if value.startswith("-"):
        raise ArgumentError(f"{name} {show(value)}: starts with '-' (a flag); hint: {hint}")
    return value


def text(name: str, value: Any, hint: str) -> str:
    """A str (bytes are refused: the caller decodes them)."""
    if not isinstance(value, str):
        extra = " (decode it first: data.decode())" if isinstance(value, bytes) else ""
        raise ArgumentTypeError(
            f"{name} {show(value)}: must be a str, not {_type_name(value)}{extra}; hint: {hint}"
        )
    return value


def path(name: str, value: Any, hint: str) -> str:
    """A str or os.PathLike naming a path (bytes refused); returned as str."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f"{name} {show(value)}: must be a path (str or os.PathLike), not {_type_name(value)}; "
            f"hint: {hint}"
        )
    if not value:
        raise ArgumentError(f"{name} '': is empty; hint: {hint}")
    return value


def existing_file(name: str, value: Any, hint: str) -> str:
    """A path (as `path`) of an existing regular file."""
    p = path(name, value, hint)
    if not os.path.exists(p):
        raise ArgumentError(f"{name} '{p}': no such file; hint: {hint}")
    if not os.path.isfile(p):
        raise ArgumentError(f"{name} '{p}': is not a regular file; hint: {hint}")
    return p


def writable_file(name: str, value: Any, hint: str) -> str:
    """A path (as `path`) whose folder exists and which is not a folder itself."""
    p = path(name, value, hint)
    folder = os.path.dirname(os.path.abspath(p))
    if os.path.isdir(p):
        raise ArgumentError(f"{name} '{p}': is a folder; hint: {hint}")
    if not os.path.isdir(folder):
        raise ArgumentError(f"{name} '{p}': its folder {folder} does not exist; hint: {hint}")
    return p


def read_text(path_: str, what: str, hint: str, error: type[Exception] = ArgumentError) -> str:
    """The file's text (UTF-8); `error` naming the file and the first byte that is not text
    (a binary file), or what the system said."""
    try:
        data = Path(path_).read_bytes()
    except OSError as e:
        raise error(f"{what} '{path_}': cannot read it: {e.strerror or e}; hint: {hint}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(
            f"{what} '{path_}': not text (byte 0x{data[e.start]:02x} at offset {e.start} is not "
            f"UTF-8); hint: {hint}"
        ) from None


def executable(name: str, value: Any, hint: str) -> str:
    """A path (as `path`) of an executable file; BinaryNotFoundError otherwise (a missing
    binary is an environment problem, as in find_binary)."""
    p = path(name, value, hint)
    if not (os.path.isfile(p) and os.access(p, os.X_OK)):
        raise BinaryNotFoundError(f"{name} '{p}': no executable file; hint: {hint}")
    return p


def callable_or_none(name: str, value: Any, hint: str) -> Any:
    """None or a callable."""
    if value is not None and not callable(value):
        raise ArgumentTypeError(
            f"{name} {show(value)}: must be callable or None, not {_type_name(value)}; hint: {hint}"
        )
    return value
