#!/usr/bin/env bash
# Runs every fuzz target of a TIGHTPIPE_FUZZ build (scripts/sanitize.sh makes one) for
# FUZZ_SECONDS each (default 10), JOBS at a time, starting from its seed corpus fuzz/corpus/<name>
# (read only: new inputs go to $B/fuzz-work/<name>). A finding (crash, sanitizer report, uncaught
# exception, an input slower than 20 s or a single allocation over 1 GiB) fails the script and
# leaves the input in $B/fuzz-artifacts/ (docs/fuzzing.md: how to reproduce and keep it).
# Usage: scripts/fuzz.sh [NAME...]   (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${FUZZ_BUILD_DIR:-${SAN_BUILD_DIR:-build-sanitize}}
# 10 s: in a 20 s run of every target here (2026-12-06) each one had reached 96-100% of its
# final edge coverage (median 98%) after the first half of its runs, and nothing was found; the
# corpus is not kept from one run to the next, so this is a bounded smoke fuzz of every reader in
# every test command. A longer hunt: FUZZ_SECONDS=300 ./scripts/fuzz.sh NAME (docs/fuzzing.md).
SECS=${FUZZ_SECONDS:-10}
JOBS=${JOBS:-$(nproc)}
source scripts/sanitizer-env.sh
names=("$@")
if ((${#names[@]} == 0)); then
  for d in fuzz/corpus/*/; do names+=("$(basename "$d")"); done
fi
if [ "$SECS" = 0 ]; then
  echo "fuzz: FUZZ_SECONDS=0, skipped"
  exit 0
fi
mkdir -p "$B/fuzz-artifacts" "$B/fuzz-logs"
run_one() {
  local name=$1 bin="$B/fuzz/fuzz_$1"
  if [ ! -x "$bin" ]; then
    echo "fuzz $name: $bin is missing (build with -DTIGHTPIPE_FUZZ=ON, target fuzz_targets)"
    return 1
  fi
  rm -rf "$B/fuzz-work/$name"
  mkdir -p "$B/fuzz-work/$name"
  local log="$B/fuzz-logs/$name.log" rc=0
  "$bin" -max_total_time="$SECS" -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="$B/fuzz-artifacts/$name-" \
    "$B/fuzz-work/$name" "fuzz/corpus/$name" >"$log" 2>&1 || rc=$?
  local execs
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
  if ((rc != 0)); then
    echo "fuzz $name: FINDING (exit $rc) after $execs runs; log $log:"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|fuzz property failed|artifact_prefix|Test unit written|.*uncaught exception)' "$log" | head -20
    return 1
  fi
  echo "fuzz $name: $execs runs in ${SECS} s, no finding"
}
export -f run_one
export B SECS
printf '%s\n' "${names[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one "$@"' _ {}
