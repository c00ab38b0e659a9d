#!/usr/bin/env bash
# One format for every C++ file: the project's .clang-format (Google base, 100 columns), applied
# by Debian 12's clang-format (14; scripts/setup.sh installs it).
#
#   scripts/format.sh          check (scripts/test.sh's lane `format`): every C++ file of the tree
#                              that git tracks or would add (new files included) through
#                              `clang-format --dry-run --Werror`; each difference is printed as
#                              FILE:LINE:COL and the script exits 1
#   scripts/format.sh --fix    rewrite those files in place, and the Python files python/tightpipe,
#                              python/tests and every .py under bench/ with `ruff format` and
#                              ruff's import sorting (python/pyproject.toml's settings; the ruff of
#                              the Python environment, scripts/setup-python.sh; skipped, loudly,
#                              without it)
#
# The whole-tree reformat is one commit made by `scripts/format.sh --fix` alone: after merging
# branches that touch C++ or Python files, run it again and commit what it changes.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=check
case "${1:-}" in
  "") ;;
  --fix) mode=fix ;;
  *)
    echo "format.sh: unknown argument '$1'; hint: no argument checks, --fix rewrites" >&2
    exit 2
    ;;
esac
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if ! command -v "$CLANG_FORMAT" >/dev/null; then
  echo "format.sh: $CLANG_FORMAT not found; hint: ./scripts/setup.sh installs it" >&2
  exit 1
fi
# Tracked files and new ones not ignored (build folders are ignored), that exist.
files=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] && files+=("$f")
done < <(git ls-files -z --cached --others --exclude-standard -- '*.cc' '*.h' '*.cpp' '*.hpp')
if [ "$mode" = fix ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -r -n 50 -P "${JOBS:-$(nproc)}" "$CLANG_FORMAT" -i
  echo "format.sh: clang-format applied to ${#files[@]} C++ files"
  venv=$(./scripts/setup-python.sh --print-venv)
  # The folders scripts/lint-python.sh's ruff step checks (every .py in them), with the settings
  # of python/pyproject.toml named (bench/ has no configuration of its own).
  py_paths=(python/tightpipe python/tests bench)
  if [ -x "$venv/bin/ruff" ]; then
    "$venv/bin/ruff" check --no-cache --config python/pyproject.toml --fix --select I --quiet \
      "${py_paths[@]}"
    "$venv/bin/ruff" format --no-cache --config python/pyproject.toml --quiet "${py_paths[@]}"
    echo "format.sh: ruff format and import sorting applied to ${py_paths[*]}"
  else
    echo "format.sh: SKIPPED ${py_paths[*]}: no ruff at $venv/bin/ruff; hint: run" \
      "./scripts/setup-python.sh, then this again"
  fi
  exit 0
fi
out=$(printf '%s\0' "${files[@]}" |
  xargs -0 -r -n 50 -P "${JOBS:-$(nproc)}" "$CLANG_FORMAT" --dry-run --Werror 2>&1) && rc=0 || rc=$?
if ((rc != 0)); then
  # One line per difference: FILE:LINE:COL (clang-format's own lines, without the code excerpt).
  grep -E '^[^ ].*:[0-9]+:[0-9]+: error:' <<<"$out" | sed 's/: error: code should be clang-formatted.*$//' |
    sed 's/$/: not formatted/' | head -200 || true
  n=$(grep -cE '^[^ ].*:[0-9]+:[0-9]+: error:' <<<"$out" || true)
  echo "format.sh: FAILED: $n differences in $(grep -E '^[^ ].*:[0-9]+:[0-9]+: error:' <<<"$out" |
    cut -d: -f1 | sort -u | wc -l) files differ from .clang-format; hint: scripts/format.sh --fix" >&2
  if ((n == 0)); then echo "$out" >&2; fi
  exit 1
fi
echo "format.sh: ${#files[@]} C++ files formatted as .clang-format says"
