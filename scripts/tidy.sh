#!/usr/bin/env bash
# clang-tidy over the library and the CLI (every .cc under src/ and tools/ but the tests), with the
# checks of .clang-tidy (each one left out is named there with why), zero findings: scripts/test.sh's
# lane `clang-tidy`. Clang's own warnings of those files (-Wall -Wextra) count as findings too.
#
#   scripts/tidy.sh [FILE.cc...]    (default: every such file the build compiles)
#
# It reads ${BUILD_DIR:-build}/compile_commands.json (scripts/setup.sh's build, which must be
# built: the objects' recorded dependencies name each file's headers) and runs JOBS (default nproc)
# clang-tidy processes at once. Bounded in time by a cache, like ccache's: a file that was clean is
# not checked again while its compile command, its own text and every project header it includes,
# .clang-tidy and clang-tidy's version are unchanged (${TP_TIDY_CACHE:-~/.cache/tightpipe/tidy},
# shared by the clones of the machine; TP_TIDY_CACHE=off checks every file). Findings are never
# cached: each run prints them again, as FILE:LINE:COL: warning: ... [check], and exits 1.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
B=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
CLANG_TIDY=${CLANG_TIDY:-clang-tidy}
if ! command -v "$CLANG_TIDY" >/dev/null; then
  echo "tidy.sh: $CLANG_TIDY not found; hint: ./scripts/setup.sh installs it (clang-tidy)" >&2
  exit 1
fi
if [ ! -f "$B/compile_commands.json" ] || [ ! -f "$B/build.ninja" ]; then
  echo "tidy.sh: no $B/compile_commands.json; hint: ./scripts/setup.sh builds $B first" >&2
  exit 1
fi
files=("$@")
if ((${#files[@]} == 0)); then
  while IFS= read -r -d '' f; do
    [ -f "$f" ] && files+=("$f")
  done < <(git ls-files -z --cached --others --exclude-standard -- 'src/*.cc' 'tools/*.cc' |
    grep -zv -e '_test\.cc$' -e '_test_[a-z_]*\.cc$')
fi
# file -> its object and compile command (absolute path of the file, as CMake writes it).
index=$(mktemp)
trap 'rm -f "$index"' EXIT
python3 - "$B/compile_commands.json" "$root" "${files[@]}" >"$index" <<'EOF'
import json, os, sys
db, root, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
by_file = {}
for e in json.load(open(db)):
    f = os.path.relpath(os.path.join(e["directory"], e["file"]), root)
    cmd = e.get("command") or " ".join(e["arguments"])
    by_file.setdefault(f, (e.get("output", ""), cmd))
# A source compiled inside a generated unity file (the CLI's tightpipe_all.cc: #include "x.cc"
# from the build folder's copy of its directory) is checked through that file, once.
unity = {}
for f, (out, cmd) in by_file.items():
    if f.endswith("_all.cc"):
        src_dir = os.path.relpath(os.path.dirname(os.path.join(root, f)),
                                  os.path.join(root, sys.argv[1].rsplit("/", 1)[0]))
        for line in open(os.path.join(root, f)):
            if line.startswith('#include "'):
                unity[os.path.join(src_dir, line.split('"')[1])] = f
seen = set()
for f in wanted:
    if f not in by_file and f in unity:
        f = unity[f]
    if f in seen:
        continue
    seen.add(f)
    if f in by_file:
        out, cmd = by_file[f]
        # The object path as ninja names it (relative to the build folder).
        if not out:
            parts = cmd.split()
            out = parts[parts.index("-o") + 1] if "-o" in parts else ""
        print(f"{f}\t{out}\t{cmd}")
    else:
        print(f"tidy.sh: {f}: not compiled by this build, skipped", file=sys.stderr)
EOF
tidy_version=$("$CLANG_TIDY" --version | tr '\n' ' ')
config_hash=$(cat .clang-tidy | sha256sum | cut -c1-16)
cache=${TP_TIDY_CACHE:-$HOME/.cache/tightpipe/tidy}
[ "$cache" = off ] || mkdir -p "$cache"
# key FILE OBJ CMD: the cache key of one file (empty when its dependencies are not recorded).
key() {
  local deps
  deps=$(cd "$B" && ninja -t deps "$2" 2>/dev/null | sed -n 's/^    //p')
  [ -n "$deps" ] || return 0
  {
    echo "$tidy_version $config_hash ${3//$root/@}"  # the clone's path left out: shared
    # The project's files by content; system headers by name (Debian upgrades: TP_TIDY_CACHE=off).
    (cd "$B" && grep -v '^/usr/' <<<"$deps" | xargs -r sha256sum | sed "s|$root|@|g")
    grep '^/usr/' <<<"$deps"
  } | sha256sum | cut -c1-32
}
todo=()
cached=0
while IFS=$'\t' read -r f obj cmd; do
  k=""
  [ "$cache" = off ] || k=$(key "$f" "$obj" "$cmd")
  if [ -n "$k" ] && [ -f "$cache/$k" ]; then
    cached=$((cached + 1))
  else
    todo+=("$f:$k")
  fi
done <"$index"
echo "tidy.sh: ${#files[@]} files: $cached clean in the cache, ${#todo[@]} to check ($JOBS at once)"
out=$(mktemp -d)
trap 'rm -f "$index"; rm -rf "$out"' EXIT
# check ITEM: one file ("FILE:KEY"); its output in $out, the key stamped when it is clean.
check() {
  local f=${1%:*} k=${1##*:} log
  log="$out/$(echo "$f" | tr / _).log"
  if "$CLANG_TIDY" -p "$B" --quiet --warnings-as-errors='*' "$f" >"$log" 2>&1; then
    [ -z "$k" ] || [ "$cache" = off ] || touch "$cache/$k"
  else
    echo "$f" >"$log.failed"
  fi
}
export -f check
export CLANG_TIDY B out cache
t0=$SECONDS
((${#todo[@]} == 0)) || printf '%s\0' "${todo[@]}" | xargs -0 -r -n 1 -P "$JOBS" bash -c 'check "$1"' _
failed=$(cat "$out"/*.failed 2>/dev/null | wc -l)
if ((failed > 0)); then
  # Each finding once (a header's finding shows up in every file that includes it), with the path
  # relative to the tree.
  cat "$out"/*.log | grep -E '^/.*:[0-9]+:[0-9]+: (warning|error):' | sed "s|^$root/||" |
    sed 's/ \[\(.*\),-warnings-as-errors\]$/ [\1]/' | sort -u
  echo "tidy.sh: FAILED: $failed file(s) with findings ($((SECONDS - t0)) s); hint: fix them," \
    "or where a check is wrong for this code, say why in .clang-tidy" >&2
  exit 1
fi
echo "tidy.sh: clean (${#todo[@]} files checked in $((SECONDS - t0)) s, $cached from the cache)"
