# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: how the sanitizer runtimes report.
# ASan/UBSan stop at the first report (UBSan's halt_on_error: a finding is a failure, not a log
# line); LeakSanitizer runs, with the leaks of Open MPI and its libraries (hwloc, pmix, libevent)
# suppressed by name in scripts/lsan.supp, never as a whole.
_tp_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$_tp_root/scripts/lsan.supp:print_suppressions=0}
# Symbolized stack traces (the llvm package of scripts/setup.sh).
for _tp_sym in llvm-symbolizer /usr/lib/llvm-14/bin/llvm-symbolizer; do
  if command -v "$_tp_sym" >/dev/null 2>&1; then
    export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v "$_tp_sym")}
    break
  fi
done
unset _tp_root _tp_sym
