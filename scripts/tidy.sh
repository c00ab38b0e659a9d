#!/usr/bin/env bash
# clang-tidy over the library and the CLI (every .cc under src/ and tools/ but the tests), with the
# checks of .clang-tidy (each one left out is named there with why), zero findings: scripts/test.sh's
# lane `clang-tidy`. Clang's own warnings of those files (-Wall -Wextra) count as findings too.
#
#   scripts/tidy.sh [FILE.cc...]    (default: every such file the build compiles)
#
# It reads ${BUILD_DIR:-build}/compile_commands.json (scripts/setup.sh's build, which must be
# built: the objects' recorded dependencies name each file's headers), checks the files of one
# build target together as one translation unit (below), and runs JOBS (default nproc) clang-tidy
# processes at once. Bounded in time by a cache, like ccache's: a translation unit that was clean
# is not checked again while its compile command, its files' text and every project header they
# include, .clang-tidy and clang-tidy's version are unchanged
# (${TP_TIDY_CACHE:-~/.cache/tightpipe/tidy}, shared by the clones of the machine;
# TP_TIDY_CACHE=off checks everything). Findings are never cached: each run prints them again, as
# FILE:LINE:COL: warning: ... [check], and exits 1.
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
# The files to check, one translation unit per build target: the files of one target share one
# compile command (but for -o and the file), and clang-tidy spends most of its time on what they
# all include (the standard library, fmt, nlohmann/json: parsed and walked by every check once per
# translation unit), so each target's files are checked together, included by one generated file
# $B/tidy-unity/<target>_all.cc with its own $B/tidy-unity/compile_commands.json (issue 50: 108
# files one by one took 328 s cold here, 2 at once). Findings are still reported at each file's
# own lines. A file whose command differs from its target's (its own compile definitions) is
# checked alone, and so is the CLI's tightpipe_all.cc, a unity file of its own.
# Each line of $index: NAME<TAB>FILE TO CHECK<TAB>OBJECTS (space-separated)<TAB>COMMAND.
index=$(mktemp)
trap 'rm -f "$index"' EXIT
rm -rf "$B/tidy-unity"
mkdir -p "$B/tidy-unity"
python3 - "$B/compile_commands.json" "$root" "$B/tidy-unity" "${files[@]}" >"$index" <<'EOF'
import json, os, re, shlex, sys
db, root, unity_dir, wanted = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
build = os.path.dirname(db)
by_file = {}
for e in json.load(open(db)):
    f = os.path.relpath(os.path.join(e["directory"], e["file"]), root)
    cmd = e.get("command") or shlex.join(e["arguments"])
    if f not in by_file:
        by_file[f] = (e["directory"], e.get("output", ""), cmd, e["file"])
# A source compiled inside a generated unity file (the CLI's tightpipe_all.cc, and with
# TIGHTPIPE_UNITY each library's <target>_unity_<n>.cc: #include "x.cc" from the build folder's
# copy of its directory) is checked through that file, once.
def is_unity(f):
    return f.endswith("_all.cc") or re.search(r"_unity_[0-9]+\.cc$", f) is not None
unity = {}
for f in by_file:
    if is_unity(f):
        src_dir = os.path.relpath(os.path.dirname(os.path.join(root, f)),
                                  os.path.join(root, build))
        for line in open(os.path.join(root, f)):
            if line.startswith('#include "'):
                unity[os.path.join(src_dir, line.split('"')[1])] = f
groups = {}  # (directory, command without its file and -o) -> [(file, object, directory, cmd)]
seen = set()
for f in wanted:
    if f not in by_file and f in unity:
        f = unity[f]
    if f in seen:
        continue
    seen.add(f)
    if f not in by_file:
        print(f"tidy.sh: {f}: not compiled by this build, skipped", file=sys.stderr)
        continue
    directory, out, cmd, abs_file = by_file[f]
    parts = shlex.split(cmd)
    if not out:
        out = parts[parts.index("-o") + 1] if "-o" in parts else ""
    # The target's command: the flags alone (no -o OBJECT, no -c FILE).
    flags, skip = [], False
    for i, a in enumerate(parts):
        if skip:
            skip = False
        elif a in ("-o", "-c"):
            skip = True
        elif a != abs_file:
            flags.append(a)
    key = (directory, shlex.join(flags))
    if is_unity(f):
        key = key + (f,)  # a unity file of the build: alone
    groups.setdefault(key, []).append((f, out, cmd))
entries = []
for key, members in groups.items():
    directory, flags = key[0], key[1]
    if len(members) == 1:
        f, out, cmd = members[0]
        print(f"{f}\t{f}\t{out}\t{cmd}")
        continue
    # The target's name from its objects' folder (src/data/CMakeFiles/tp_data.dir/x.cc.o).
    obj_dir = os.path.dirname(members[0][1])
    while obj_dir and not obj_dir.endswith(".dir"):
        obj_dir = os.path.dirname(obj_dir)
    name = os.path.basename(obj_dir)[:-len(".dir")] if obj_dir else f"unit{len(entries)}"
    tu = os.path.join(unity_dir, f"{name}_all.cc")
    with open(tu, "w") as w:
        w.write(f"// Generated by scripts/tidy.sh: the files of {name}, one translation unit.\n")
        for f, _, _ in members:
            w.write(f'#include "{os.path.join(root, f)}"  '
                    "// NOLINT(bugprone-suspicious-include): one TU\n")
    tu_abs = os.path.abspath(tu)
    cmd = f"{flags} -o {shlex.quote(tu_abs + '.o')} -c {shlex.quote(tu_abs)}"
    entries.append({"directory": directory, "command": cmd, "file": tu_abs})
    objs = " ".join(out for _, out, _ in members)
    print(f"{' '.join(f for f, _, _ in members)}\t{tu}\t{objs}\t{cmd}")
json.dump(entries, open(os.path.join(unity_dir, "compile_commands.json"), "w"), indent=1)
EOF
tidy_version=$("$CLANG_TIDY" --version | tr '\n' ' ')
config_hash=$(cat .clang-tidy | sha256sum | cut -c1-16)
cache=${TP_TIDY_CACHE:-$HOME/.cache/tightpipe/tidy}
[ "$cache" = off ] || mkdir -p "$cache"
# key OBJECTS CMD: the cache key of one translation unit (empty when a dependency of one of its
# objects is not recorded).
key() {
  local deps obj all=""
  for obj in $1; do
    deps=$(cd "$B" && ninja -t deps "$obj" 2>/dev/null | sed -n 's/^    //p')
    [ -n "$deps" ] || return 0
    all+="$deps"$'\n'
  done
  all=$(sort -u <<<"$all" | sed '/^$/d')
  {
    echo "$tidy_version $config_hash ${2//$root/@}"  # the clone's path left out: shared
    # The project's files by content; system headers by name (Debian upgrades: TP_TIDY_CACHE=off).
    (cd "$B" && grep -v '^/usr/' <<<"$all" | xargs -r sha256sum | sed "s|$root|@|g")
    grep '^/usr/' <<<"$all"
  } | sha256sum | cut -c1-32
}
todo=()
cached=0
units=0
while IFS=$'\t' read -r members tu objs cmd; do
  units=$((units + 1))
  k=""
  [ "$cache" = off ] || k=$(key "$objs" "$cmd")
  if [ -n "$k" ] && [ -f "$cache/$k" ]; then
    cached=$((cached + 1))
  else
    todo+=("$tu:$k")
  fi
done <"$index"
echo "tidy.sh: ${#files[@]} files in $units translation units (one per build target):" \
  "$cached clean in the cache, ${#todo[@]} to check ($JOBS at once)"
out=$(mktemp -d)
trap 'rm -f "$index"; rm -rf "$out"' EXIT
# check ITEM: one translation unit ("FILE:KEY"); its output in $out, the key stamped when clean.
check() {
  local f=${1%:*} k=${1##*:} log db=$B
  log="$out/tu_$(echo "$f" | tr / _).log"  # tu_: never a dot file, which * would miss
  [[ $f != "$B/tidy-unity/"* ]] || db=$B/tidy-unity
  # The commands are GCC's: its own spelling -Wunused-const-variable=1 (CMakeLists.txt) is no
  # option of clang's, which would call it an error.
  # --config-file: the tree's .clang-tidy, also for a build folder outside the tree (clang-tidy
  # looks for it beside the file it checks, which is in the build folder for a unity file).
  if "$CLANG_TIDY" -p "$db" --quiet --warnings-as-errors='*' --config-file="$root/.clang-tidy" \
    --extra-arg=-Wno-unknown-warning-option "$f" >"$log" 2>&1; then
    [ -z "$k" ] || [ "$cache" = off ] || touch "$cache/$k"
  else
    echo "$f" >"$log.failed"
  fi
}
export -f check
export CLANG_TIDY B out cache root
t0=$SECONDS
((${#todo[@]} == 0)) || printf '%s\0' "${todo[@]}" | xargs -0 -r -n 1 -P "$JOBS" bash -c 'check "$1"' _
failed=$(cat "$out"/*.failed 2>/dev/null | wc -l)
if ((failed > 0)); then
  # Each finding once (a header's finding shows up in every file that includes it), with the path
  # relative to the tree.
  cat "$out"/*.log | grep -E '^/.*:[0-9]+:[0-9]+: (warning|error|note: previous definition)' |
    sed "s|^$root/||" |
    sed 's/ \[\(.*\),-warnings-as-errors\]$/ [\1]/' | sort -u
  if cat "$out"/*.log | grep -qE ': error: redefinition of '; then
    echo "tidy.sh: a redefinition between two files of one target: here (and in the sanitizer" \
      "build, CMakeLists.txt tp_unity) they share one translation unit; give one its own name" >&2
  fi
  echo "tidy.sh: FAILED: $failed translation unit(s) with findings ($((SECONDS - t0)) s); hint:" \
    "fix them, or where a check is wrong for this code, say why in .clang-tidy" >&2
  exit 1
fi
echo "tidy.sh: clean (${#todo[@]} translation units checked in $((SECONDS - t0)) s, $cached from" \
  "the cache)"
