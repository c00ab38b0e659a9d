#!/usr/bin/env bash
# ctest python_pip_install (labels python, slow): `pip install ./python` as a PyTorch user runs it,
# in a fresh virtual environment (python3 -m venv, no system site-packages), with pip's build
# isolation (scikit-build-core and its pins from python/pyproject.toml's build-system.requires):
# it must build the `tightpipe` CLI and bundle it in the package. Then, from a folder outside the
# clone, with TIGHTPIPE_BIN and PYTHONPATH unset and no build of the clone on PATH:
#   - `import tightpipe` is the installed package and find_binary() is its bundled binary;
#   - tightpipe.schedule.generate("zb-h1", pp=2, microbatches=4) runs through it;
#   - the console script `tightpipe --help`, `tightpipe schedule ...` and `python -m tightpipe`.
# Also: build-system.requires pins exactly what python/requirements.txt pins (the one pins file).
#
# Exits 77 (ctest: skipped), loudly, when the package index cannot be reached or python3 has no
# venv module; never passes without installing. The build goes to <clone>/build-wheel
# (pyproject.toml: build-dir), compiled through ccache like build/: warm, a rebuild is hits.
# The two settings added to the user's command: the build's -Werror and unity translation units
# (TIGHTPIPE_WERROR and TIGHTPIPE_UNITY, given by ctest; scikit-build-core reads
# SKBUILD_CMAKE_DEFINE), so that the wheel compiles with the default build's exact flags and
# translation units and ccache hits the objects that build just made, even cold.
#   PYTHON             the interpreter (default python3)
#   TIGHTPIPE_WERROR   ON or OFF, as the build that runs the test was configured (default OFF,
#                      a user's pip install)
#   TIGHTPIPE_UNITY    ON or OFF, the same (default OFF)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
name=python_pip_install
start=$SECONDS
fail() {
  echo "$name: FAILED: $*" >&2
  exit 1
}

# 1. The pins: build-system.requires == the same lines of python/requirements.txt.
"$PY" - "$repo/python/pyproject.toml" "$repo/python/requirements.txt" <<'EOF' || exit 1
import re, sys, tomllib
with open(sys.argv[1], "rb") as f:
    requires = tomllib.load(f)["build-system"]["requires"]
canon = lambda n: re.sub(r"[-_.]+", "-", n).lower()
pins = {}
for line in open(sys.argv[2]):
    line = line.split("#")[0].strip()
    if "==" in line:
        n, v = line.split("==", 1)
        pins[canon(n.strip())] = v.strip()
bad = []
for req in requires:
    m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^=<>!~ ]+)", req)
    if not m:
        bad.append(f"'{req}' is no exact pin (name==version)")
    elif pins.get(canon(m[1])) != m[2]:
        bad.append(f"'{req}' but python/requirements.txt pins "
                   f"{pins.get(canon(m[1]), 'nothing')} for {m[1]}")
if bad:
    print(f"python_pip_install: FAILED: python/pyproject.toml build-system.requires: "
          f"{'; '.join(bad)}; hint: pin the same versions in both", file=sys.stderr)
    sys.exit(1)
EOF

# 2. The index must answer (pip's build isolation fetches scikit-build-core).
index=${PIP_INDEX_URL:-https://pypi.org/simple}
if ! "$PY" - "$index" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/scikit-build-core/", timeout=20).read(1)
except Exception as e:
    print(f"the package index {sys.argv[1]} cannot be reached: {e}", file=sys.stderr)
    sys.exit(1)
EOF
then
  echo "$name: SKIPPED: the package index $index cannot be reached, so pip cannot fetch" \
    "scikit-build-core; run it where the index answers"
  exit 77
fi
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "$name: SKIPPED: $PY has no venv/ensurepip module; hint: apt-get install python3-venv" \
    "(./scripts/setup-python.sh does)"
  exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tightpipe-pip-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
venv="$tmp/venv"

# 3. A fresh environment and the install, as a user types it.
t=$SECONDS
"$PY" -m venv "$venv" || fail "$PY -m venv $venv"
t_venv=$((SECONDS - t))
t=$SECONDS
if ! (cd "$repo" && env -u TIGHTPIPE_BIN -u PYTHONPATH PIP_DISABLE_PIP_VERSION_CHECK=1 \
  SKBUILD_CMAKE_DEFINE="TIGHTPIPE_WERROR=${TIGHTPIPE_WERROR:-OFF};TIGHTPIPE_UNITY=${TIGHTPIPE_UNITY:-OFF}" \
  "$venv/bin/python" -m pip install ./python >"$tmp/pip.log" 2>&1); then
  tail -n 40 "$tmp/pip.log" >&2
  fail "pip install ./python (the last 40 lines of its output above)"
fi
t_pip=$((SECONDS - t))

# 4. Outside the clone: no TIGHTPIPE_BIN, no PYTHONPATH, PATH without the clone's build.
mkdir -p "$tmp/elsewhere"
cd "$tmp/elsewhere" || fail "cd $tmp/elsewhere"
clean_path="$venv/bin:/usr/local/bin:/usr/bin:/bin"
run() { env -u TIGHTPIPE_BIN -u PYTHONPATH PATH="$clean_path" "$@"; }
run python - "$venv" "$repo" <<'EOF' || fail "the installed package (above)"
import os, sys
venv, repo = sys.argv[1], sys.argv[2]
import tightpipe, tightpipe.cli, tightpipe.schedule
pkg = os.path.dirname(os.path.realpath(tightpipe.__file__))
assert pkg.startswith(os.path.realpath(venv)), f"tightpipe imported from {pkg}, not the venv"
exe = tightpipe.cli.find_binary()
assert exe == str(tightpipe.cli.bundled_binary()), f"find_binary() is {exe}, not the bundled one"
assert os.path.realpath(exe).startswith(os.path.realpath(venv)), exe
s = tightpipe.schedule.generate("zb-h1", pp=2, microbatches=4)
assert (s.num_ranks, s.num_stages, s.num_microbatches) == (2, 2, 4), s
assert s.compute_order(0)[:2] == ["0F0", "0F1"], s.compute_order(0)
assert "valid" in s.check_output, s.check_output
print(f"python_pip_install: bundled binary {exe}; zb-h1 p=2 m=4 rank 0:",
      " ".join(s.compute_order(0)))
EOF
script=$(PATH="$clean_path" command -v tightpipe)
[ "$script" = "$venv/bin/tightpipe" ] || fail "tightpipe on PATH is '$script', not the venv's"
run tightpipe --help >"$tmp/help.txt" 2>&1 || fail "tightpipe --help: $(cat "$tmp/help.txt")"
grep -q "schedule" "$tmp/help.txt" || fail "tightpipe --help names no 'schedule' command"
run tightpipe schedule --schedule 1f1b --pp 2 --microbatches 4 >"$tmp/grid.txt" 2>&1 ||
  fail "tightpipe schedule: $(cat "$tmp/grid.txt")"
run python -m tightpipe schedule --schedule 1f1b --pp 2 --microbatches 4 >"$tmp/grid2.txt" 2>&1 ||
  fail "python -m tightpipe schedule: $(cat "$tmp/grid2.txt")"
cmp -s "$tmp/grid.txt" "$tmp/grid2.txt" || fail "python -m tightpipe and tightpipe differ"
run tightpipe schedule --pp 0 >/dev/null 2>&1 && fail "tightpipe schedule --pp 0 exited 0"

echo "$name: passed: fresh venv ${t_venv} s, pip install ./python ${t_pip} s" \
  "(build-wheel, ccache), total $((SECONDS - start)) s"
