"""Find and run the `tightpipe` binary.

Where it is looked for, in order: $TIGHTPIPE_BIN; the binary bundled in the installed package
(tightpipe/bin/tightpipe, what `pip install ./python` builds); build/tools/tightpipe/tightpipe of
the clone this package sits in (python/../build); `tightpipe` on PATH (not the console script of
this package, which runs the binary found here: `main`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tightpipe import _args
from tightpipe.errors import ArgumentTypeError, BinaryNotFoundError, CliError

_PACKAGE = Path(__file__).resolve().parent
_REPO = _PACKAGE.parents[1]


def bundled_binary() -> Path:
    """Where `pip install` puts the binary it builds: tightpipe/bin/tightpipe in the package."""
    return _PACKAGE / "bin" / "tightpipe"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _is_console_script(path: Path) -> bool:
    """True for the `tightpipe` script pip writes for [project.scripts]: it runs `main`, which
    would look for the binary again (a loop), so PATH skips it."""
    try:
        with open(path, "rb") as f:
            head = f.read(1024)
    except OSError:
        return False
    return head.startswith(b"#!") and b"tightpipe.cli" in head


def find_binary() -> str:
    """The path of the `tightpipe` binary; BinaryNotFoundError naming each place looked at."""
    env = os.environ.get("TIGHTPIPE_BIN")
    if env:
        if _is_executable(Path(env)):
            return env
        raise BinaryNotFoundError(
            f"TIGHTPIPE_BIN is '{env}', which is no executable file; "
            "hint: point it at build/tools/tightpipe/tightpipe, or unset it"
        )
    bundled = bundled_binary()
    built = _REPO / "build" / "tools" / "tightpipe" / "tightpipe"
    for cand in (bundled, built):
        if _is_executable(cand):
            return str(cand)
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        cand = Path(folder or ".") / "tightpipe"
        if _is_executable(cand) and not _is_console_script(cand):
            return str(cand)
    raise BinaryNotFoundError(
        f"no tightpipe binary: TIGHTPIPE_BIN is unset, neither {bundled} (pip install) nor "
        f"{built} (a build of the clone) exists and none is on PATH; hint: `pip install ./python` "
        "from the clone, build it (./scripts/setup.sh) or set TIGHTPIPE_BIN"
    )


def run(
    args: list[str], *, binary: str | os.PathLike[str] | None = None, timeout: float = 120.0
) -> str:
    """Runs `tightpipe ARGS...`; returns its stdout, or raises CliError with its stderr."""
    if isinstance(args, (str, bytes)) or not isinstance(args, (list, tuple)):
        raise ArgumentTypeError(
            f"args {_args.show(args)}: must be a list of str, not {type(args).__name__}; "
            "hint: one item per word, e.g. ['schedule', '--pp', '2']"
        )
    for i, a in enumerate(args):
        _args.text(f"args[{i}]", a, "one item per word, e.g. ['schedule', '--pp', '2']")
    _args.positive_seconds("timeout", timeout, "seconds the binary may take, e.g. timeout=120")
    exe = (
        find_binary()
        if binary is None
        else _args.executable("binary", binary, "the tightpipe binary's path, or leave binary out")
    )
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise CliError(
            f"`tightpipe {' '.join(args)}` exited with {proc.returncode}: {proc.stderr.strip()}"
        )
    return proc.stdout


def main() -> None:
    """The `tightpipe` console script (and `python -m tightpipe`): runs the binary that
    find_binary names with this process's arguments, in place of this process."""
    try:
        exe = find_binary()
    except BinaryNotFoundError as e:
        print(f"tightpipe: {e}", file=sys.stderr)
        sys.exit(127)
    os.execv(exe, [exe, *sys.argv[1:]])
