#!/usr/bin/env bash
# The Python package python/tightpipe held to what the C++ side is (docs/testing.md): ruff's lint
# and format check, and mypy --strict (python/pyproject.toml holds both tools' settings), with the
# ruff and mypy pinned in python/requirements.txt, from the environment of scripts/setup-python.sh
# (mypy checks the torch calls against the pinned torch there). ruff also checks the package's
# tests (python/tests) and the bench scripts (every .py under bench/), with the same settings;
# mypy the package and the bench scripts (not the tests). Every .py file under those folders at
# run time is checked, new ones included.
#
#   scripts/lint-python.sh ruff    ruff check + ruff format --check of python/tightpipe,
#                                  python/tests and bench/ (lane `ruff`)
#   scripts/lint-python.sh mypy    mypy of python/tightpipe and bench/ (lane `mypy`)
#   scripts/lint-python.sh         both
#
# Each finding is printed as FILE:LINE:COL with its rule, and the script exits 1. Without the
# environment (no package index when it was to be made) it prints a loud SKIPPED line and exits
# 77: scripts/test.sh shows that lane as skipped, never as passed.
set -uo pipefail
cd "$(dirname "$0")/.."
steps=("$@")
((${#steps[@]})) || steps=(ruff mypy)
venv=$(./scripts/setup-python.sh --print-venv)
for t in "${steps[@]}"; do
  case $t in
    ruff | mypy) ;;
    *)
      echo "lint-python.sh: unknown step '$t'; hint: ruff or mypy" >&2
      exit 2
      ;;
  esac
  if [ ! -f "$venv/.tightpipe-complete" ] || [ ! -x "$venv/bin/$t" ]; then
    echo "lint-python.sh: SKIPPED $t: no Python environment with $t at $venv; hint: run" \
      "./scripts/setup-python.sh where the package index answers (it installs the pins of" \
      "python/requirements.txt)"
    exit 77
  fi
done
# What ruff checks (folders: every .py in them, new ones included), all with python/pyproject.toml's
# settings: bench/ has no configuration of its own, so the file is named with --config.
ruff_paths=(python/tightpipe python/tests bench)
ruff_config=(--config python/pyproject.toml)
rc=0
for t in "${steps[@]}"; do
  case $t in
    ruff)
      "$venv/bin/ruff" check --no-cache "${ruff_config[@]}" --output-format concise \
        "${ruff_paths[@]}" || rc=1
      # The files ruff format would change, one line each (`scripts/format.sh --fix` fixes them).
      if ! out=$("$venv/bin/ruff" format --no-cache "${ruff_config[@]}" --check \
        "${ruff_paths[@]}" 2>&1); then
        # ruff prints each file's first difference as "--> FILE:LINE:COL", then the diff.
        if grep -q -- '-->' <<<"$out"; then
          sed -n 's|^ *--> \(.*\)$|\1: not formatted as ruff format says|p' <<<"$out"
        else
          echo "$out"
        fi
        echo "lint-python.sh: ruff format: $(grep -c -- '-->' <<<"$out") file(s) differ;" \
          "hint: scripts/format.sh --fix (or ruff format ${ruff_config[*]} ${ruff_paths[*]})"
        rc=1
      fi
      ;;
    mypy)
      # The cache lives in the environment (shared by the clones that use it, never in the tree).
      "$venv/bin/mypy" --config-file python/pyproject.toml --cache-dir "$venv/.mypy_cache" \
        python/tightpipe || rc=1
      # The bench scripts, with the same settings: they import tightpipe and python/tests' helper
      # modules (as PYTHONPATH=python:python/tests runs them), so both are on MYPYPATH. They are
      # scripts, not a package (no __init__.py): --explicit-package-bases names each by its path
      # from the root (bench.torch.tune_bench), so two scripts of one name in two folders are two
      # modules, not a duplicate.
      MYPYPATH=python:python/tests "$venv/bin/mypy" --config-file python/pyproject.toml \
        --cache-dir "$venv/.mypy_cache" --explicit-package-bases bench || rc=1
      ;;
  esac
done
exit $rc
