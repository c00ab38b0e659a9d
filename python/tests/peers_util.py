"""What the peer tests share: skips with a loud line when an engine or the binary is missing, and
one harness run per (engine, p, v) for the whole session (spawning p processes and importing an
engine costs seconds; the orders, the timing and the report tests read the same runs)."""

import functools
import importlib.util
import os
import sys

import pytest

from tightpipe.peers.common import make_costs

ORDER_F_MS, ORDER_B_MS = 1.0, 2.0  # orders only: short stages keep the test fast


def need(module: str) -> None:
    if importlib.util.find_spec(module.split(".")[0]) is None:
        line = (
            f"SKIPPED: {module} is not installed in {sys.prefix}; run "
            f"scripts/setup-python-peers.sh {sys.prefix}"
        )
        print(line, file=sys.stderr)
        pytest.skip(line)


def need_tightpipe() -> str:
    from tightpipe.peers.common import PeerError
    from tightpipe.peers.compare import find_tightpipe

    try:
        return find_tightpipe()
    except PeerError as e:
        pytest.skip(f"SKIPPED: {e}")


def group_for(p: int, m: int) -> int:
    """Megatron's microbatch group for an interleaved run of m: p when p divides m, else all m in
    one group (a last group of fewer than p is refused by Megatron and by our generator)."""
    return p if m % p == 0 else m


TIMED_M = 8  # the timed runs: p = 4, m = 8, stages long enough to time


def timed_costs(p: int, v: int):
    """F 10 ms and B 20 ms per rank (per chunk / v), the last stage 1.5x."""
    return make_costs(p * v, 10.0 / v, 20.0 / v)


@functools.lru_cache(maxsize=None)
def megatron_runs(p: int, v: int):
    """Runs m = p .. 4p with short stages (orders), then at p = 4 one timed run (4 steps), all in
    one process group."""
    need("megatron.core")
    from tightpipe.peers import megatron
    from tightpipe.peers.common import RunSpec

    ms = list(range(p, 4 * p + 1))
    specs = [RunSpec(m, group=group_for(p, m)) for m in ms]
    if p == 4:
        specs.append(RunSpec(TIMED_M, costs=timed_costs(p, v), steps=4, group=p))
    return tuple(
        megatron.run_many(
            p,
            specs,
            make_costs(p * v, ORDER_F_MS, ORDER_B_MS),
            vpp=v,
            steps=2,
            batch_p2p=not (p == 2 and v > 1),
        )
    )


@functools.lru_cache(maxsize=None)
def deepspeed_runs(p: int):
    need("deepspeed")
    from tightpipe.peers import deepspeed
    from tightpipe.peers.common import RunSpec

    specs = [RunSpec(m) for m in range(p, 4 * p + 1)]
    if p == 4:
        specs.append(RunSpec(TIMED_M, costs=timed_costs(p, 1), steps=4))
    return tuple(deepspeed.run_many(p, specs, make_costs(p, ORDER_F_MS, ORDER_B_MS), steps=2))


def order_runs(runs):
    return [r for r in runs if r.steps == 2]


def timed_run(engine: str, p: int, v: int, m: int):
    """The timed run of the (engine, p, v) group (the last one)."""
    run = (megatron_runs(p, v) if engine == "megatron" else deepspeed_runs(p))[-1]
    assert run.steps == 4 and run.microbatches == m
    return run


def tmp_dir(tmp_path_factory, name: str) -> str:
    return str(tmp_path_factory.mktemp(name))


__all__ = [
    "need",
    "need_tightpipe",
    "megatron_runs",
    "deepspeed_runs",
    "timed_run",
    "order_runs",
    "group_for",
    "tmp_dir",
    "os",
]
