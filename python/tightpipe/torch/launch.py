"""Run a function on p CPU processes joined in one gloo process group (tests, benches, examples).

    results = spawn(2, work, arg)   # work(rank, world_size, arg) runs on every rank; returns a list
                                    # of what each rank's call returned, by rank

The processes start from a fork server that has imported torch (process_context) and use a free
local port (free_port); each sets torch's thread count to `threads`. An exception on any rank is
raised here with that rank's traceback. `steady_malloc` (or spawn(..., steady_malloc=True)) makes
glibc's malloc keep the memory a process frees, so a step's tensors reuse touched pages.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

from tightpipe import _args
from tightpipe.errors import ArgumentError, ArgumentTypeError, TightpipeError


class RankError(TightpipeError, RuntimeError):
    """A rank of `spawn` raised."""


def process_context() -> Any:
    """The multiprocessing context every rank process of this package starts from: a fork
    server that has imported torch once (multiprocessing's "forkserver" with torch preloaded),
    so no state of the caller reaches a rank, as with "spawn", but a rank does not import torch
    again (about 2 CPU-seconds each on a Zen 3 core; the test suite starts hundreds). The fork
    server starts with the first rank of the calling process and reads its environment then.
    TIGHTPIPE_START_METHOD=spawn starts every rank afresh instead."""
    method = os.environ.get("TIGHTPIPE_START_METHOD", "forkserver")
    if method not in ("forkserver", "spawn"):
        raise ArgumentError(
            f"TIGHTPIPE_START_METHOD {method!r}: must be forkserver or spawn; hint: unset it"
        )
    if method == "forkserver":
        mp.set_forkserver_preload(["torch"])
    return mp.get_context(method)


_MALLOC_MODE = "default"

# glibc's mallopt parameters (malloc.h) and what steady_malloc sets them to: no mmap at all
# (M_MMAP_MAX 0: every tensor, however large, comes from the heap), never trim the heap's top, grow
# it 64 MiB at a time.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
_STEADY = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_TOP_PAD, 64 << 20))


def steady_malloc() -> None:
    """Make glibc's malloc keep what this process frees: every tensor comes from the heap instead of
    a fresh mmap each (mmap off: with only glibc's threshold raised to its 32 MiB maximum, a GPT's
    38.6 MB embedding gradient at d = 384, vocabulary 25128, was still mmapped afresh in every
    backward: 9,424 faults, 22-25 ms instead of 4-5 ms on a Zen 4 core), and the heap is never
    trimmed, so once the heap has grown a step's tensors reuse pages already touched. Left at its
    default, glibc hands each large tensor's pages back when it is freed and the next step faults
    them in again, zeroed: on a Zen 4 core 9,000-20,000 minor faults per backward of a GPT's
    embedding and nine blocks (d = 384), about 12% of its time, a count that moves with the heap's
    history, so a module timed alone and the same module in a pipeline differ (docs/torch.md
    sections 7 and 8). Call it first in every rank's process and in the one that runs
    measure_layers, so the costs and the run see the same allocator. Process-wide; the memory kept
    is what the process's peak step needs. Raises OSError where the C library has no glibc mallopt
    (not Linux with glibc)."""
    global _MALLOC_MODE
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError) as e:
        raise OSError(
            f"steady_malloc: this C library has no mallopt ({e}); hint: it needs Linux with "
            "glibc; elsewhere leave it out (or preload an allocator that keeps freed memory, "
            "such as jemalloc or tcmalloc)"
        ) from e
    for param, value in _STEADY:
        if mallopt(ctypes.c_int(param), ctypes.c_int(value)) != 1:
            raise OSError(
                f"steady_malloc: glibc's mallopt({param}, {value}) refused; hint: this glibc "
                "takes other limits: leave steady_malloc out, or preload jemalloc or tcmalloc"
            )
    _MALLOC_MODE = "steady"


def malloc_mode() -> str:
    """'steady' once steady_malloc() has run in this process, else 'default'."""
    return _MALLOC_MODE


def free_port() -> int:
    """A local TCP port free now, for a process group's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _entry(
    rank: int,
    world: int,
    port: int,
    threads: int,
    pg_timeout: float,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    queue: Any,
    steady: bool = False,
) -> None:
    try:
        if steady:
            steady_malloc()
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        import datetime

        import torch
        import torch.distributed as dist

        torch.set_num_threads(threads)
        dist.init_process_group(
            "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=pg_timeout)
        )
        try:
            result = fn(rank, world, *args)
        finally:
            dist.destroy_process_group()
        queue.put((rank, True, result))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        queue.put((rank, False, traceback.format_exc()))


def spawn(
    world: int,
    fn: Callable[..., Any],
    *args: Any,
    threads: int = 1,
    timeout: float = 600.0,
    pg_timeout: float = 120.0,
    steady_malloc: bool = False,
) -> list[Any]:
    """fn(rank, world, *args) on `world` gloo processes; the results by rank. `fn` must be a
    module-level function (spawn pickles it). A gloo operation that waits longer than
    `pg_timeout` seconds fails (a hung schedule becomes an error, not a hang).
    `steady_malloc=True` runs steady_malloc() in each rank's process before fn. A rank that
    raises, or whose process dies without reporting (its signal named: the out-of-memory killer
    sends SIGKILL), or that does not report within `timeout`, ends the call with a RankError
    naming it; a dead rank is seen within about a second, not at the timeout."""
    _args.count(
        "world", world, 1, _args.MAX_RANKS, "the pipeline's rank count, e.g. schedule.num_ranks"
    )
    if not callable(fn):
        raise ArgumentTypeError(
            f"fn {_args.show(fn)}: must be callable, not {type(fn).__name__}; hint: a "
            "module-level function fn(rank, world, *args)"
        )
    _args.count("threads", threads, 1, 1024, "torch threads per process, e.g. threads=1")
    _args.positive_seconds("timeout", timeout, "seconds all ranks may take, e.g. timeout=600")
    _args.positive_seconds(
        "pg_timeout", pg_timeout, "seconds a gloo operation may wait, e.g. pg_timeout=120"
    )
    if not isinstance(steady_malloc, bool):
        raise ArgumentTypeError(
            f"steady_malloc {_args.show(steady_malloc)}: must be True or False, not "
            f"{type(steady_malloc).__name__}; hint: steady_malloc=True runs steady_malloc() in "
            "each rank first"
        )
    ctx = process_context()
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(
            target=_entry,
            args=(r, world, port, threads, pg_timeout, fn, args, queue, steady_malloc),
        )
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors: list[str] = []
    reported: set[int] = set()
    try:
        deadline = time.monotonic() + timeout
        while len(reported) < world and not errors:
            try:
                rank, ok, value = queue.get(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
            except queue_mod.Empty:
                # A rank whose process died without reporting (a signal: the kernel's
                # out-of-memory killer sends SIGKILL) never will: say so now, not at the timeout.
                if _dead_unreported(procs, reported) or time.monotonic() >= deadline:
                    break
                continue
            reported.add(rank)
            if ok:
                results[rank] = value
            else:
                errors.append(f"rank {rank}:\n{value}")
                break  # the other ranks may now hang on a collective: stop them below
    finally:
        for p in procs:
            p.join(timeout=5 if errors or len(reported) < world else timeout)
        # Before the survivors are terminated below (their SIGTERM is ours, not a cause).
        killed: list[str] = [
            f"rank {r}: its process died with {_exit_text(code)} before it reported"
            for r, code in _dead_unreported(procs, reported)
        ]
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
    if killed or errors:
        raise RankError("a rank failed; " + "\n".join(killed + errors))
    if len(reported) < world:
        raise RankError(
            f"ranks {sorted(set(range(world)) - reported)} did not report within timeout="
            f"{timeout:g} s; hint: a larger timeout, or fewer steps"
        )
    return [results[r] for r in range(world)]


def _dead_unreported(procs: list[Any], reported: set[int]) -> list[tuple[int, int]]:
    """(rank, exit code) of each rank whose process has ended with a nonzero code without
    reporting to the parent."""
    return [
        (r, p.exitcode)
        for r, p in enumerate(procs)
        if r not in reported and p.exitcode not in (None, 0)
    ]


def _exit_text(code: int) -> str:
    """'signal 9 (SIGKILL: ...)' for a negative exit code, else 'exit status N'."""
    if code >= 0:
        return f"exit status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "?"
    hint = (
        ": the kernel's out-of-memory killer sends it (dmesg says); hint: less memory per rank"
        if -code == signal.SIGKILL
        else ""
    )
    return f"signal {-code} ({name}{hint})"
