#!/usr/bin/env bash
# Checks the locking of src/ with clang's thread-safety analysis: every
# src/**/*.cc entry of BUILD_DIR/compile_commands.json is compiled with
# clang++ -fsyntax-only and -Wthread-safety -Wthread-safety-beta -Werror,
# with the entry's own -I/-isystem/-iquote/-D/-U/-std flags and nothing else
# (no GCC-only flags, no GCC precompiled header: clang cannot read it).
# Only the thread-safety warnings are on (-Wno-everything first): clang's
# other warnings on a tree built with GCC are not this check's business.
#
# usage: scripts/thread_safety.sh BUILD_DIR [PATH...]
#   BUILD_DIR  a configured (and built: generated headers such as
#              tensorboard_event.pb.h must exist) CMake build directory
#   PATH...    only the files under these paths, relative to the repository
#              root (default: src)
# environment: CLANG (default /usr/bin/clang++, else clang++ or clang++-14
#              on PATH), THREAD_SAFETY_JOBS (default: nproc)
#
# First it proves the check is live: tests/common/thread_safety_seeded.cc,
# which writes a GUARDED_BY field without its lock, must be refused.
#
# exit: 0 every file passes; 1 some file fails (each is printed with its
# diagnostics); 2 the seeded violation was not caught (the check is dead);
# 64 usage error; 77 skipped: no clang++.
set -uo pipefail

if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
  exit 64
fi
BUILD_DIR=$1
shift
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CDB="$BUILD_DIR/compile_commands.json"
if [[ ! -f "$CDB" ]]; then
  echo "thread-safety: no $CDB (configure with CMake first; it is written" \
       "by CMAKE_EXPORT_COMPILE_COMMANDS)" >&2
  exit 64
fi

CLANG=${CLANG:-}
if [[ -z "$CLANG" ]]; then
  for c in /usr/bin/clang++ clang++ clang++-14; do
    if command -v "$c" > /dev/null 2>&1; then
      CLANG=$(command -v "$c")
      break
    fi
  done
fi
if [[ -z "$CLANG" ]] || ! command -v "$CLANG" > /dev/null 2>&1; then
  echo "thread-safety: SKIPPED: clang++ not found (install clang, or set" \
       "CLANG=/path/to/clang++); the lock annotations were not checked" >&2
  exit 77
fi
if ! command -v python3 > /dev/null 2>&1; then
  echo "thread-safety: python3 is needed to read $CDB" >&2
  exit 64
fi
JOBS=${THREAD_SAFETY_JOBS:-$(nproc 2> /dev/null || echo 2)}
CHECK_FLAGS=(-fsyntax-only -Wno-everything -Wthread-safety
             -Wthread-safety-beta -Werror)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/thread_safety.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)

# 1. The seeded violation must fail, with a thread-safety diagnostic.
SEEDED="$ROOT/tests/common/thread_safety_seeded.cc"
if [[ ! -f "$SEEDED" ]]; then
  echo "thread-safety: FAILED: the seeded violation $SEEDED is missing," \
       "so the check cannot show it is live" >&2
  exit 2
fi
"$CLANG" -std=c++17 -I"$ROOT/src" "${CHECK_FLAGS[@]}" "$SEEDED" \
  > "$WORK/seeded.log" 2>&1
seeded_rc=$?
if [[ $seeded_rc -eq 0 ]] ||
   ! grep -qF -- '[-Werror,-Wthread-safety' "$WORK/seeded.log"; then
  echo "thread-safety: FAILED: the seeded violation" \
       "tests/common/thread_safety_seeded.cc (a GUARDED_BY field written" \
       "without its lock) was not refused by $CLANG ${CHECK_FLAGS[*]}:" \
       "the analysis is not live (annotations compiled out? not clang?)." >&2
  cat "$WORK/seeded.log" >&2
  exit 2
fi

# 2. One argument file per translation unit (NUL-separated clang++
#    arguments), and the file's path beside it.
python3 - "$CDB" "$ROOT" "$WORK" "${CHECK_FLAGS[@]}" -- "$@" << 'EOF'
import json, os, shlex, sys

cdb, root, work = sys.argv[1:4]
rest = sys.argv[4:]
split = rest.index("--")
check_flags, prefixes = rest[:split], rest[split + 1:] or ["src"]
prefixes = [os.path.join(root, p.rstrip("/")) for p in prefixes]

def wanted(path):
    return path.endswith(".cc") and any(
        path == p or path.startswith(p + "/") for p in prefixes)

# Flags kept: include paths, macros, the language standard. Everything
# else (optimisation, GCC-only warnings, -include of the GCC PCH,
# -Winvalid-pch, -o, -c, -MD...) is dropped.
WITH_ARG = ("-I", "-isystem", "-iquote", "-idirafter", "-D", "-U")

def kept_flags(args, directory):
    out, i = [], 1
    while i < len(args):
        a = args[i]
        takes = next((p for p in WITH_ARG if a == p), None)
        if takes and i + 1 < len(args):
            value = args[i + 1]
            if takes in ("-I", "-isystem", "-iquote", "-idirafter"):
                value = os.path.normpath(os.path.join(directory, value))
            out += [takes, value]
            i += 2
            continue
        if a.startswith("-I") and len(a) > 2:
            out.append("-I" + os.path.normpath(os.path.join(directory, a[2:])))
        elif a.startswith(("-D", "-U")) or a.startswith("-std="):
            out.append(a)
        elif a == "-include" and i + 1 < len(args) and \
                "cmake_pch" not in args[i + 1]:
            out += [a, os.path.normpath(os.path.join(directory, args[i + 1]))]
            i += 1
        elif a == "-include":
            i += 1  # the GCC precompiled header: clang cannot read it
        i += 1
    return out

seen = set()
n = 0
for e in json.load(open(cdb)):
    directory = e.get("directory", ".")
    path = os.path.normpath(os.path.join(directory, e["file"]))
    if not wanted(path) or path in seen:
        continue
    seen.add(path)
    args = e.get("arguments") or shlex.split(e["command"])
    argv = kept_flags(args, directory) + check_flags + [path]
    with open(os.path.join(work, "%05d.args" % n), "w") as f:
        f.write("\0".join(argv))
    with open(os.path.join(work, "%05d.file" % n), "w") as f:
        f.write(os.path.relpath(path, root))
    n += 1
EOF
[[ $? -eq 0 ]] || exit 64

shopt -s nullglob
jobs=("$WORK"/*.args)
total=${#jobs[@]}
if [[ $total -eq 0 ]]; then
  echo "thread-safety: no src/**/*.cc entries under ${*:-src} in $CDB" >&2
  exit 64
fi

# 3. All files, $JOBS at a time.
export CLANG
printf '%s\0' "${jobs[@]}" |
  xargs -0 -n 1 -P "$JOBS" bash -c \
    'xargs -0 -a "$1" "$CLANG" > "${1%.args}.log" 2>&1; echo $? > "${1%.args}.rc"' _

failed=0
for job in "${jobs[@]}"; do
  base=${job%.args}
  rc=$(cat "$base.rc" 2> /dev/null || echo 1)
  if [[ "$rc" != 0 ]]; then
    failed=$((failed + 1))
    echo "=== FAILED: $(cat "$base.file")"
    cat "$base.log"
  fi
done
elapsed=$(($(date +%s) - start))
echo "thread-safety: $total files, $failed failed (${elapsed} s, $JOBS jobs," \
     "$("$CLANG" --version | head -n 1))"
[[ $failed -eq 0 ]]
