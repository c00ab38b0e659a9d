#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (every label, slow, mpi and python ones
# included), then the sanitizer lane: an ASan+UBSan build of the unit tests, its `ctest -L unit`,
# and every fuzz target for a bounded time (scripts/sanitize.sh; SANITIZE=0 skips it).
# Both builds treat every compiler warning as an error (TP_WERROR=0 turns that off), and the
# static lanes hold the tree to one format (scripts/format.sh), clang-tidy (scripts/tidy.sh),
# ruff for python/tightpipe, python/tests and bench/, and mypy --strict for python/tightpipe and
# bench/ (scripts/lint-python.sh).
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
# lane NAME COMMAND...: runs one lane, records pass / FAIL and its time. LANE_T0 (a $SECONDS)
# makes the time count from then, for a lane that started in the background; a duration the
# command leaves in lane_seconds replaces it (a background lane's own run, which may have ended
# before it was waited for), and a note it leaves in lane_note is printed beside the time.
lane_note=""
lane_seconds=""
lane() {
  local name=$1
  shift
  local t0=${LANE_T0:-$SECONDS} rc=0 note secs
  echo "test.sh: lane '$name': $*"
  "$@" || rc=$?
  note=${lane_note:+  ($lane_note)}
  lane_note=""
  secs=${lane_seconds:-$((SECONDS - t0))}
  lane_seconds=""
  if ((rc == 77)) && [ "${LANE_MAY_SKIP:-0}" = 1 ]; then
    # The lane could not run (it printed a SKIPPED line saying why): never counted as passed.
    status[$name]=skipped
    results+=("$(printf '  %-28s %-8s %5d s  (%s)' "$name" skipped "$secs" \
      "no Python environment: see its SKIPPED line")")
  elif ((rc == 0)); then
    status[$name]=pass
    results+=("$(printf '  %-28s %-8s %5d s%s' "$name" pass "$secs" "$note")")
  else
    status[$name]=fail
    failed=1
    results+=("$(printf '  %-28s %-8s %5d s  (exit %d)%s' "$name" FAIL "$secs" "$rc" \
      "$note")")
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
# Two lanes run in the background beside others, each in its own process group with its output
# in a log that its lane prints when it ends; the lane's time is its own, from its start to its
# end, and its note says how much of it came after the lanes it ran beside:
# - the Python environment, beside the build and the static lanes: it is mostly downloading and
#   unpacking (network and disk), they are compiling;
# - the sanitizer build, at the lowest priority (idle_priority, below) from the end of the package
#   step, beside the GCC build, the static lanes and the main ctest: it takes the cores they leave
#   idle (a configure step, the build's last long translation units, mypy's one thread, the
#   tests' waits for sleeps of emulated compute, time-outs, MPI start-up, browsers, spawned
#   Python processes) and barely slows them, the load the suite is built to run beside
#   (scripts/load-beside.sh).
declare -A bg_pid bg_t0 bg_epoch0 bg_log
# idle_priority COMMAND...: COMMAND at nice 19. A background lane is a session of its own
# (setsid, below), and where the kernel groups each session's processes for the scheduler
# (/proc/sys/kernel/sched_autogroup_enabled, on by default in Debian's kernels) the groups share
# the cores equally whatever their processes' nice values: nice 19 alone would still take half
# of the machine from the lanes beside it. So the group's own nice value is raised too.
# (bg_start's shell runs it: exported.)
idle_priority() {
  [ ! -w /proc/self/autogroup ] || echo 19 >/proc/self/autogroup 2>/dev/null || true
  nice -n 19 "$@"
}
export -f idle_priority
interrupted() {
  echo "test.sh: interrupted"
  # Each background lane is its own process group (setsid, below). An unfinished Python
  # environment leaves only its temporary folder, which no later run trusts
  # (scripts/setup-python.sh); an unfinished build is finished by the next one (Ninja).
  local name
  for name in "${!bg_pid[@]}"; do
    kill -TERM -- "-${bg_pid[$name]}" "${bg_pid[$name]}" 2>/dev/null
  done
  failed=1
  print_lanes
  exit 130
}
trap interrupted INT TERM
# bg_start NAME COMMAND...: starts lane NAME's command in the background.
bg_start() {
  local name=$1
  shift
  bg_log[$name]=$(mktemp "${TMPDIR:-/tmp}/tightpipe-lane-XXXXXX.log")
  echo "test.sh: lane '$name' started in the background: $* (log ${bg_log[$name]})"
  bg_t0[$name]=$SECONDS
  bg_epoch0[$name]=$(date +%s)
  # Its own process group (setsid: a background child here leads none, so setsid does not fork
  # and $! is that group; -w keeps the exit status if it ever does), for interrupted() to end.
  # The shell around the command writes when it ended (seconds since the epoch) beside the log,
  # so the lane's time is the command's own run, not the wait until the lanes beside it ended.
  # shellcheck disable=SC2016
  setsid -w bash -c '"$@"; rc=$?; date +%s >"$0"; exit "$rc"' "${bg_log[$name]}.end" "$@" \
    >"${bg_log[$name]}" 2>&1 &
  bg_pid[$name]=$!
}
# bg_lane NAME COMMAND...: lane NAME: waits for its background command (starting COMMAND now, in
# the foreground's place, if it never started), prints its output; its status is the command's.
bg_lane() {
  local name=$1
  shift
  [ -n "${bg_pid[$name]:-}" ] || bg_start "$name" "$@"
  LANE_T0=${bg_t0[$name]} lane "$name" bg_wait "$name"
}
bg_wait() {
  local name=$1 rc=0 t0=$SECONDS
  wait "${bg_pid[$name]}" || rc=$?
  unset "bg_pid[$name]"
  local end
  end=$(cat "${bg_log[$name]}.end" 2>/dev/null) || end=""
  [ -z "$end" ] || lane_seconds=$((end - bg_epoch0[$name]))
  lane_note="beside the lanes above; $((SECONDS - t0)) s of it after them"
  cat "${bg_log[$name]}"
  rm -f "${bg_log[$name]}" "${bg_log[$name]}.end"
  return "$rc"
}

# The Python side (PyTorch and the peer engines, python/): a virtual environment outside the clone,
# reused by the next clone on this machine (scripts/setup-python.sh). Its tests are ctest's
# label `python`; without the environment they skip loudly.
python_wanted() { [ -x scripts/setup-python.sh ] && [ "${TP_PYTHON:-1}" != 0 ]; }
san_build=(idle_priority ./scripts/sanitize.sh build)
# Lane "setup and build": the Debian packages first (setup-python needs the compiler and
# python3-venv from them, the sanitizer build clang, and two apt-gets cannot run at once), then
# the Python environment and the sanitizer build are started in the background, then the build.
setup_and_build() {
  ./scripts/setup.sh packages || return
  if python_wanted; then bg_start "python environment" ./scripts/setup-python.sh; fi
  if [ "${SANITIZE:-1}" != 0 ]; then bg_start "sanitizer build" "${san_build[@]}"; fi
  ./scripts/setup.sh build
}
lane "setup and build" setup_and_build
# The static lanes: one format (needs only clang-format), clang-tidy (needs the build's
# compile_commands.json and its objects' dependencies), ruff and mypy (need the Python
# environment's pinned tools: without it they say SKIPPED and count as skipped, never passed).
lane "format" ./scripts/format.sh
if [ "${status[setup and build]}" = pass ]; then
  lane "clang-tidy" ./scripts/tidy.sh
else
  skip "clang-tidy" "the build failed"
fi
if [ -x scripts/setup-python.sh ]; then
  if [ "${TP_PYTHON:-1}" = 0 ]; then
    skip "python environment" "TP_PYTHON=0"
  else
    bg_lane "python environment" ./scripts/setup-python.sh
  fi
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
  bg_lane "sanitizer build" "${san_build[@]}"
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
