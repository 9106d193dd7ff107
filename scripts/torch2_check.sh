#!/usr/bin/env bash
# Builds strata and runs its tests against LibTorch 2.x on the CPU: Debian 13
# (trixie) in a chroot, whose libtorch-dev is 2.6 (with GCC 14, fmt 10,
# protobuf 3.21). The GPU machines run LibTorch 2.x and Debian 12 has 1.13,
# so this is where a 2.x-only difference (an API, a thread LibTorch starts)
# shows up before GPU minutes are spent on it. Needs root and Debian's
# archive; not part of `make test`.
#
#   scripts/torch2_check.sh DIR [CTEST_ARGS...]
#
# DIR (e.g. /work/trixie) receives the chroot on the first run (debootstrap,
# a few minutes) and keeps it: later runs update its clone of this
# repository's HEAD and build incrementally. STRATA_DATA_DIR, if set, is
# bound into the chroot as the tests' data. CTEST_ARGS go to ctest (e.g.
# -R Precision); with none, the whole suite runs (~13 min build from
# scratch and ~11 min of tests on 2 cores). Uncommitted changes are not seen.
set -euo pipefail
DIR=${1:?usage: scripts/torch2_check.sh DIR [CTEST_ARGS...]}
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" -eq 0 ] || { echo "torch2_check: needs root (chroot, mounts)" >&2; exit 1; }

# What the build and the tests need (scripts/setup.sh's list, less what
# only some tests use: the browser, Prometheus and Slurm tests skip, saying
# so).
PACKAGES=build-essential,cmake,ninja-build,pkg-config,ccache,git,curl,ca-certificates,python3
PACKAGES+=,libtorch-dev,libopenblas0-pthread,libopenblas-dev,libzmq3-dev,cppzmq-dev
PACKAGES+=,libucx-dev,libgloo-dev,libprotobuf-dev,protobuf-compiler,libcpp-httplib-dev
PACKAGES+=,libtomlplusplus-dev,libcli11-dev,nlohmann-json3-dev,libfmt-dev,libgtest-dev
PACKAGES+=,libgmock-dev,libbenchmark-dev,zlib1g-dev
# The Python package and the tests that make TorchScript fixtures: PyTorch 2.6
# (Python 3.13), the same build as libtorch-dev.
PACKAGES+=,python3-dev,pybind11-dev,python3-torch

if [ ! -x "$DIR/usr/bin/g++" ]; then
  command -v debootstrap >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
  echo "torch2_check: debootstrap trixie into $DIR"
  debootstrap --variant=minbase --include="$PACKAGES" trixie "$DIR" "$MIRROR"
fi

# A chroot made by an earlier version of this list gets what it lacks.
# shellcheck disable=SC2016,SC2086
missing=$(chroot "$DIR" dpkg-query -W -f='${Package} ${Status}\n' ${PACKAGES//,/ } 2>&1 |
  awk '!/install ok installed/ {print $NF}' | tr '\n' ' ' || true)
if [ -n "${missing// /}" ]; then
  echo "torch2_check: installing $missing"
  cp /etc/resolv.conf "$DIR/etc/resolv.conf"
  chroot "$DIR" apt-get update -q
  # shellcheck disable=SC2086
  chroot "$DIR" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${PACKAGES//,/ }
fi

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -l "${mounted[$i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT
bind() {  # bind SRC DEST: mount SRC at DEST unless something is there
  mkdir -p "$2"
  mountpoint -q "$2" && return 0
  mount --rbind "$1" "$2"
  mounted+=("$2")
}
bind /proc "$DIR/proc"
bind /sys "$DIR/sys"
bind /dev "$DIR/dev"
if [ -n "${STRATA_DATA_DIR:-}" ]; then bind "$STRATA_DATA_DIR" "$DIR/data"; fi

if [ -d "$DIR/src/strata/.git" ]; then
  git -C "$DIR/src/strata" fetch -q "$ROOT" HEAD
  git -C "$DIR/src/strata" checkout -q --force FETCH_HEAD
else
  mkdir -p "$DIR/src"
  git clone -q "$ROOT" "$DIR/src/strata"
fi
echo "torch2_check: $(git -C "$DIR/src/strata" log --oneline -1)"

ctest_args=""
for a in "$@"; do ctest_args+=" $(printf '%q' "$a")"; done
data=""
if [ -n "${STRATA_DATA_DIR:-}" ]; then data="export STRATA_DATA_DIR=/data;"; fi
chroot "$DIR" bash -c "set -e; cd /src/strata
  dpkg-query -W -f='LibTorch \${Version}, ' libtorch-dev; g++ --version | head -1
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 ||
    { tail -30 build.log; exit 1; }
  ninja -C build >> build.log 2>&1 || { grep -A5 -E 'FAILED|error:' build.log | head -60; exit 1; }
  echo 'torch2_check: built'
  $data
  cd build && ctest --output-on-failure --timeout 1500 $ctest_args"
