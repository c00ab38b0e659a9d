#!/usr/bin/env bash
# The sanitizer lane (scripts/test.sh runs it after the normal suite; docs/fuzzing.md): one clang
# build with AddressSanitizer + UndefinedBehaviorSanitizer (-O1, libFuzzer coverage in the
# libraries and fuzz targets) of only what `ctest -L unit` runs and the fuzz targets, each library
# and test program as one translation unit (TIGHTPIPE_UNITY, CMakeLists.txt tp_unity: 27% less
# compile time than file by file here), then `ctest -L unit` there (less SAN_EXCLUDE, below),
# then every fuzz target for FUZZ_SECONDS over its seed corpus
# (scripts/fuzz.sh). Any sanitizer report, failing test or fuzz finding fails the script.
# Usage: scripts/sanitize.sh [build|ctest|fuzz]...  (default: all three, in that order; test.sh
# runs them as three lanes).
# Environment: SAN_BUILD_DIR (default build-sanitize), SAN_EXCLUDE (a ctest -E regex; default
# below), FUZZ_SECONDS (default 10, scripts/fuzz.sh says why; 0 skips fuzzing), JOBS (default
# nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${SAN_BUILD_DIR:-build-sanitize}
JOBS=${JOBS:-$(nproc)}
steps=("$@")
((${#steps[@]})) || steps=(build ctest fuzz)
for step in "${steps[@]}"; do
  case $step in
    build | ctest | fuzz) ;;
    *)
      echo "sanitize.sh: unknown step '$step'; hint: build, ctest or fuzz" >&2
      exit 2
      ;;
  esac
done
do_build() {
  # Warnings are errors here too (TP_WERROR=0 turns it off; scripts/setup.sh): this is the clang
  # build of the test command.
  local werror
  werror=$([ "${TP_WERROR:-1}" = 0 ] && echo OFF || echo ON)
  if [ ! -f "$B/build.ninja" ]; then
    cmake -S . -B "$B" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -gline-tables-only" \
      -DCMAKE_C_FLAGS_SANITIZE="-O1 -gline-tables-only" \
      -DTIGHTPIPE_FUZZ=ON -DTIGHTPIPE_BENCH=OFF -DTIGHTPIPE_UNITY=ON \
      -DTIGHTPIPE_WERROR="$werror" ${CMAKE_ARGS:-}
  elif ! grep -qx "TIGHTPIPE_WERROR:BOOL=$werror" "$B/CMakeCache.txt" ||
    ! grep -qx "TIGHTPIPE_UNITY:BOOL=ON" "$B/CMakeCache.txt"; then
    cmake -S . -B "$B" -DTIGHTPIPE_WERROR="$werror" -DTIGHTPIPE_UNITY=ON >/dev/null
  fi
  cmake --build "$B" -j "$JOBS" --target unit_tests fuzz_targets
}
# Left out of this lane, each still run unsanitized by the main ctest (scripts/test.sh):
# - fuzz_corpus.*: the seed corpora, which every fuzz target below runs first anyway;
# - the planner's end-to-end searches over docs/plan.md's 64-device example and the 8-stage and
#   largest-value plans (PlanTest.IssueExample*, PlanTest.EightStages*, CliPlanTest.IssueExample,
#   CliPlanTest.TableStays*): 30-80 s each here, the same search code that PlanTest's other cases
#   and the `plan` fuzz target run sanitized in seconds;
# - the bf16 equivalence cases (Bf16EquivalenceTest) but one per message pattern, as the MPI lane
#   chose them (src/exec/CMakeLists.txt): one chunk a rank (1f1b), the V (zb-v), two directions
#   (dualpipe). The bf16 kernels and messages are the same for every schedule, and each other
#   schedule's executor path runs sanitized in its FP32 case (EquivalenceTest, every generator);
#   under the sanitizers a bf16 case takes 7-20 s (0.3-1 s unsanitized): the eleven left out were
#   150 of this lane's 796 test-seconds (issue 50).
# The exhaustive sweeps (GeneratorTest.PropertySweep, Reference3.ClosedFormsSweep) take every
# few shapes in this build themselves (TIGHTPIPE_SANITIZED).
SAN_EXCLUDE=${SAN_EXCLUDE:-'^fuzz_corpus\.|^PlanTest\.(IssueExample|EightStages)|^CliPlanTest\.(IssueExample|TableStays)|^AllGenerators/Bf16EquivalenceTest\.NoClipBitIdentical/(gpipe|interleaved|loopedbfs|zbh1|zbh2|dualpipev|zbvauto|zb1p|zb2p)_'}
do_ctest() {
  source scripts/sanitizer-env.sh
  (cd "$B" && ctest --output-on-failure -j "$JOBS" -L unit -E "$SAN_EXCLUDE")
}
do_fuzz() {
  FUZZ_BUILD_DIR="$B" ./scripts/fuzz.sh
}
for step in "${steps[@]}"; do
  "do_$step"
done
