#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (every label, slow and mpi ones included), then
# the sanitizer lane: an ASan+UBSan build of the unit tests and every fuzz target for a bounded
# time (scripts/sanitize.sh; SANITIZE=0 skips it). At the end (pass or fail) it prints how long
# each lane took.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
SAN_BUILD_DIR=${SAN_BUILD_DIR:-build-sanitize}
export SAN_BUILD_DIR
lanes=()
lane_start=$SECONDS
run_start=$SECONDS
lane_done() {
  lanes+=("$(printf '  %-34s %5d s' "$1" $((SECONDS - lane_start)))")
  lane_start=$SECONDS
}
print_lanes() {
  local rc=$?
  echo "test.sh: lane times (exit $rc)"
  ((${#lanes[@]})) && printf '%s\n' "${lanes[@]}"
  # The sanitizer lane's own split (scripts/sanitize.sh writes it).
  if [ -f "$SAN_BUILD_DIR/lane-times.txt" ]; then sed 's/^/    /' "$SAN_BUILD_DIR/lane-times.txt"; fi
  printf '  %-34s %5d s\n' "total" $((SECONDS - run_start))
}
rm -f "$SAN_BUILD_DIR/lane-times.txt"
trap print_lanes EXIT
./scripts/setup.sh
lane_done "setup and build ($BUILD_DIR)"
(cd "$BUILD_DIR" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@")
lane_done "ctest (every label)"
if [ "${SANITIZE:-1}" != 0 ]; then
  ./scripts/sanitize.sh
  lane_done "sanitizer lane (scripts/sanitize.sh)"
fi
