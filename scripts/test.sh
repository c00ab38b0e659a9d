#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (every label, slow, mpi and python ones
# included), then the sanitizer lane: an ASan+UBSan build of the unit tests, its `ctest -L unit`,
# and every fuzz target for a bounded time (scripts/sanitize.sh; SANITIZE=0 skips it).
# Both builds treat every compiler warning as an error (TP_WERROR=0 turns that off), and the
# static lanes hold the tree to one format (scripts/format.sh), clang-tidy (scripts/tidy.sh),
# and ruff and mypy --strict for python/tightpipe (scripts/lint-python.sh).
# Every lane runs even when an earlier one failed (a lane that needs a failed one says skipped and
# why); at the end each lane's result and time are printed, and the exit status is non-zero when
# any lane failed. Extra arguments go to the main ctest (e.g. -L unit).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
SAN_BUILD_DIR=${SAN_BUILD_DIR:-build-sanitize}
export BUILD_DIR SAN_BUILD_DIR
run_start=$SECONDS
results=()
failed=0
declare -A status
# lane NAME COMMAND...: runs one lane, records pass / FAIL and its time.
lane() {
  local name=$1
  shift
  local t0=$SECONDS rc=0
  echo "test.sh: lane '$name': $*"
  "$@" || rc=$?
  if ((rc == 77)) && [ "${LANE_MAY_SKIP:-0}" = 1 ]; then
    # The lane could not run (it printed a SKIPPED line saying why): never counted as passed.
    status[$name]=skipped
    results+=("$(printf '  %-28s %-8s %5d s  (%s)' "$name" skipped $((SECONDS - t0)) \
      "no Python environment: see its SKIPPED line")")
  elif ((rc == 0)); then
    status[$name]=pass
    results+=("$(printf '  %-28s %-8s %5d s' "$name" pass $((SECONDS - t0)))")
  else
    status[$name]=fail
    failed=1
    results+=("$(printf '  %-28s %-8s %5d s  (exit %d)' "$name" FAIL $((SECONDS - t0)) "$rc")")
  fi
}
# skip NAME WHY: a lane that did not run; never counted as passed.
skip() {
  status[$1]=skipped
  results+=("$(printf '  %-28s %-8s        %s' "$1" skipped "$2")")
}
print_lanes() {
  trap - INT TERM
  echo
  echo "test.sh: lanes (result, time)"
  ((${#results[@]})) && printf '%s\n' "${results[@]}"
  printf '  %-28s %-8s %5d s\n' "total" "$( ((failed)) && echo FAIL || echo pass)" \
    $((SECONDS - run_start))
}
interrupted() {
  echo "test.sh: interrupted"
  failed=1
  print_lanes
  exit 130
}
trap interrupted INT TERM

lane "setup and build" ./scripts/setup.sh
# The Python side (PyTorch and the peer engines, python/): a virtual environment outside the clone,
# reused by the next clone on this machine (scripts/setup-python.sh). Its tests are ctest's
# label `python`; without the environment they skip loudly.
if [ -x scripts/setup-python.sh ]; then
  if [ "${TP_PYTHON:-1}" = 0 ]; then
    skip "python environment" "TP_PYTHON=0"
  else
    lane "python environment" ./scripts/setup-python.sh
  fi
fi
# The static lanes: one format (needs only clang-format), clang-tidy (needs the build's
# compile_commands.json and its objects' dependencies), ruff and mypy (need the Python
# environment's pinned tools: without it they say SKIPPED and count as skipped, never passed).
lane "format" ./scripts/format.sh
if [ "${status[setup and build]}" = pass ]; then
  lane "clang-tidy" ./scripts/tidy.sh
else
  skip "clang-tidy" "the build failed"
fi
if [ -x scripts/lint-python.sh ]; then
  if [ "${TP_PYTHON:-1}" = 0 ]; then
    skip "ruff" "TP_PYTHON=0"
    skip "mypy" "TP_PYTHON=0"
  else
    LANE_MAY_SKIP=1 lane "ruff" ./scripts/lint-python.sh ruff
    LANE_MAY_SKIP=1 lane "mypy" ./scripts/lint-python.sh mypy
  fi
fi
main_ctest() { (cd "$BUILD_DIR" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@"); }
if [ "${status[setup and build]}" = pass ]; then
  lane "ctest (every label)" main_ctest "$@"
else
  skip "ctest (every label)" "the build failed"
fi
if [ "${SANITIZE:-1}" = 0 ]; then
  skip "sanitizer build" "SANITIZE=0"
  skip "sanitizer ctest -L unit" "SANITIZE=0"
  skip "fuzzing" "SANITIZE=0"
else
  lane "sanitizer build" ./scripts/sanitize.sh build
  if [ "${status[sanitizer build]}" = pass ]; then
    lane "sanitizer ctest -L unit" ./scripts/sanitize.sh ctest
    lane "fuzzing" ./scripts/sanitize.sh fuzz
  else
    skip "sanitizer ctest -L unit" "the sanitizer build failed"
    skip "fuzzing" "the sanitizer build failed"
  fi
fi
print_lanes
exit $failed
