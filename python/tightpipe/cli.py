"""Find and run the `tightpipe` binary.

Where it is looked for, in order: $TIGHTPIPE_BIN; build/tools/tightpipe/tightpipe of the clone this
package sits in (python/../build); `tightpipe` on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tightpipe.errors import BinaryNotFoundError, CliError

_REPO = Path(__file__).resolve().parents[2]


def find_binary() -> str:
    """The path of the `tightpipe` binary; BinaryNotFoundError naming each place looked at."""
    env = os.environ.get("TIGHTPIPE_BIN")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise BinaryNotFoundError(
            f"TIGHTPIPE_BIN is '{env}', which is no executable file; "
            "hint: point it at build/tools/tightpipe/tightpipe, or unset it"
        )
    built = _REPO / "build" / "tools" / "tightpipe" / "tightpipe"
    if built.is_file() and os.access(built, os.X_OK):
        return str(built)
    on_path = shutil.which("tightpipe")
    if on_path:
        return on_path
    raise BinaryNotFoundError(
        f"no tightpipe binary: TIGHTPIPE_BIN is unset, {built} does not exist and none is on PATH; "
        "hint: build it (./scripts/setup.sh) or set TIGHTPIPE_BIN"
    )


def run(args: list[str], *, binary: str | None = None, timeout: float = 120.0) -> str:
    """Runs `tightpipe ARGS...`; returns its stdout, or raises CliError with its stderr."""
    exe = binary or find_binary()
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise CliError(
            f"`tightpipe {' '.join(args)}` exited with {proc.returncode}: {proc.stderr.strip()}"
        )
    return proc.stdout
