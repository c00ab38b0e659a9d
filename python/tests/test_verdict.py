"""tightpipe.verdict, bench/verdict.h's rule written once in Python, held to what verdict.h says:
PASS, FAIL, COULD NOT JUDGE where the noise is unknown or above the tolerance (never PASS with a
widened tolerance), the verdicts combined, the exit codes and the machine line."""

import pytest

from tightpipe.verdict import (
    EXIT_COULD_NOT_JUDGE,
    Verdict,
    combine,
    could_not_judge_reason,
    exit_code,
    judge,
    machine_line,
    spread,
)


def test_spread_of_identical_runs():
    assert spread([100.0]) is None
    assert spread([100.0, 110.0, 105.0]) == pytest.approx(0.10)
    with pytest.raises(ValueError):
        spread([0.0, 1.0])


def test_judge_only_where_the_noise_allows():
    assert judge(0.02, 0.03, 0.01) is Verdict.PASS
    assert judge(-0.04, 0.03, 0.01) is Verdict.FAIL
    assert judge(0.0, 0.03, 0.05) is Verdict.COULD_NOT_JUDGE  # an exact hit, but noise above
    assert judge(0.10, 0.03, 0.05) is Verdict.COULD_NOT_JUDGE
    assert judge(0.01, 0.03, None) is Verdict.COULD_NOT_JUDGE  # one run: noise unknown
    assert judge(0.01, 0.03, 0.0) is Verdict.PASS  # computed without noise
    assert could_not_judge_reason(0.01, 0.03, "hint") == ""
    assert could_not_judge_reason(0.142, 0.10, "run it alone") == (
        "identical runs spread 14.2%, above the tolerance 10.0%; hint: run it alone"
    )
    assert "one run: the noise is unknown" in could_not_judge_reason(None, 0.05, "")


def test_combine_and_exit_codes():
    P, F, C = Verdict.PASS, Verdict.FAIL, Verdict.COULD_NOT_JUDGE
    assert combine(P, P) is P
    assert combine(P, C) is C and combine(C, F) is F and combine(F, P) is F
    assert [exit_code(v) for v in (P, F, C)] == [0, 1, EXIT_COULD_NOT_JUDGE]
    assert EXIT_COULD_NOT_JUDGE == 3
    assert C.value == "COULD NOT JUDGE"


def test_machine_line_names_the_cpu_and_the_load():
    line = machine_line()
    assert line.startswith("CPU ") and "family" in line and "load average" in line
