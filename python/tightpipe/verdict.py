"""The benches' one verdict rule, for the Python benches: bench/verdict.h (C++) written once in
Python, function for function, so that bench/peers/peers_bench.py judges as every C++ bench does.

A figure is judged against its tolerance only where the machine's own noise lets it be. The noise
is the spread of identical runs, max / min - 1 (spread()). Where it is larger than the tolerance,
an error within the tolerance could be luck and one beyond it could be the machine: the check
could not be judged, the bench says so and exits EXIT_COULD_NOT_JUDGE, never PASS with a tolerance
widened to the noise. A check measured once has no known noise and cannot be judged either.
Figures computed without noise pass noise 0 and are judged by their error alone.
"""

from __future__ import annotations

import enum
from typing import Optional, Sequence

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_COULD_NOT_JUDGE = 3  # 2 is a usage error


class Verdict(enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    COULD_NOT_JUDGE = "COULD NOT JUDGE"


def spread(identical_runs: Sequence[float]) -> Optional[float]:
    """max / min - 1 of identical runs' figures; None with fewer than two (one run says nothing of
    the noise). ValueError for a figure <= 0."""
    for x in identical_runs:
        if not x > 0:
            raise ValueError(f"a run's figure {x!r}: must be > 0")
    if len(identical_runs) < 2:
        return None
    return max(identical_runs) / min(identical_runs) - 1


def judge(error: float, tolerance: float, noise: Optional[float]) -> Verdict:
    """`error` (relative, either sign) against `tolerance` (>= 0) given `noise`, the identical
    runs' spread (0 for a figure computed without noise; None when unknown): COULD NOT JUDGE when
    the noise is unknown or larger than the tolerance; else PASS when |error| <= tolerance, else
    FAIL."""
    if not tolerance >= 0:
        raise ValueError(f"tolerance {tolerance!r}: must be >= 0")
    if noise is None or noise > tolerance:
        return Verdict.COULD_NOT_JUDGE
    return Verdict.PASS if abs(error) <= tolerance else Verdict.FAIL


def could_not_judge_reason(noise: Optional[float], tolerance: float, hint: str) -> str:
    """Why judge() could not judge ("identical runs spread 14.2%, above the tolerance 10.0%; hint:
    ..."); "" when the noise allows a verdict."""
    if noise is not None and noise <= tolerance:
        return ""
    what = (
        f"identical runs spread {100 * noise:.1f}%, above the tolerance {100 * tolerance:.1f}%"
        if noise is not None
        else f"one run: the noise is unknown (tolerance {100 * tolerance:.1f}%)"
    )
    return f"{what}; hint: {hint}" if hint else what


def combine(a: Verdict, b: Verdict) -> Verdict:
    """FAIL when any failed (a judged miss stands), else COULD NOT JUDGE when any could not, else
    PASS."""
    if Verdict.FAIL in (a, b):
        return Verdict.FAIL
    if Verdict.COULD_NOT_JUDGE in (a, b):
        return Verdict.COULD_NOT_JUDGE
    return Verdict.PASS


def exit_code(verdict: Verdict) -> int:
    return {
        Verdict.PASS: EXIT_PASS,
        Verdict.FAIL: EXIT_FAIL,
        Verdict.COULD_NOT_JUDGE: EXIT_COULD_NOT_JUDGE,
    }[verdict]


def machine_line() -> str:
    """The machine a judged figure comes from, for a bench's header: 'CPU AMD EPYC (family 25,
    model 1), 2 online; load average 1.95 1.76 2.08' (the fields lscpu prints, from /proc/cpuinfo's
    first processor, and /proc/loadavg); "?" for what cannot be read."""
    name = family = model = "?"
    online = 0
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if not sep:
                    continue
                key, value = key.strip(), value.strip()
                if key == "processor":
                    online += 1
                if online > 1:
                    continue
                if key == "model name":
                    name = value
                elif key == "cpu family":
                    family = value
                elif key == "model":
                    model = value
    except OSError:
        pass
    load = "?"
    try:
        with open("/proc/loadavg") as fh:
            load = " ".join(fh.read().split()[:3]) or "?"
    except OSError:
        pass
    return f"CPU {name} (family {family}, model {model}), {online} online; load average {load}"
