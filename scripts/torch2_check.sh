#!/usr/bin/env bash
# Builds strata and runs its tests against LibTorch 2.x on the CPU: Debian 13
# (trixie) in a chroot, whose libtorch-dev is 2.6 (with GCC 14, fmt 10,
# protobuf 3.21). The GPU machines run LibTorch 2.x and Debian 12 has 1.13,
# so this is where a 2.x-only difference (an API, a thread LibTorch starts)
# shows up before GPU minutes are spent on it. Needs root and Debian's
# archive; not part of `make test`.
#
#   scripts/torch2_check.sh [--cuda] DIR [CTEST_ARGS...]
#
# --cuda: Debian 13's CUDA build of LibTorch 2.6 instead (contrib's
# libtorch-cuda-dev, non-free's CUDA 12.4 toolkit): strata builds with
# torch_cuda linked and CUDA graphs compiled in (models/cuda_graph.cc), and
# the suite runs on a CUDA LibTorch that finds no GPU, as a GPU-less machine
# with the GPU machines' kind of build would. Debian ships cuDNN only as a
# downloader of NVIDIA's archive (nvidia-cudnn), which this machine must not
# use, so the script puts in its place a stand-in package whose
# libcudnn.so.9 defines every cuDNN function libtorch_cuda and
# libtorch_python name (they bind them at load), each returning an error;
# nothing on the CPU calls them.
# Use another DIR than the CPU flavour's (the two LibTorch packages
# conflict).
#
# DIR (e.g. /work/trixie) receives the chroot on the first run (debootstrap,
# a few minutes) and keeps it: later runs update its clone of this
# repository's HEAD and build incrementally. STRATA_DATA_DIR, if set, is
# bound into the chroot as the tests' data. CTEST_ARGS go to ctest (e.g.
# -R Precision); with none, the whole suite runs (~13 min build from
# scratch and ~11 min of tests on 2 cores). Uncommitted changes are not seen.
set -euo pipefail
CUDA=0
if [ "${1:-}" = "--cuda" ]; then CUDA=1; shift; fi
DIR=${1:?usage: scripts/torch2_check.sh [--cuda] DIR [CTEST_ARGS...]}
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" -eq 0 ] || { echo "torch2_check: needs root (chroot, mounts)" >&2; exit 1; }

# What the build and the tests need (scripts/setup.sh's list, less what
# only some tests use: the browser, Prometheus and Slurm tests skip, saying
# so).
BASE=build-essential,cmake,ninja-build,pkg-config,ccache,git,curl,ca-certificates,python3
BASE+=,libopenblas0-pthread,libopenblas-dev,libzmq3-dev,cppzmq-dev
BASE+=,libucx-dev,libprotobuf-dev,protobuf-compiler,libcpp-httplib-dev
BASE+=,libtomlplusplus-dev,libcli11-dev,nlohmann-json3-dev,libfmt-dev,libgtest-dev
BASE+=,libgmock-dev,libbenchmark-dev,zlib1g-dev,python3-dev,pybind11-dev
# LibTorch, Gloo, and PyTorch 2.6 (Python 3.13) of the same build, for the
# Python package's tests and the tests that make TorchScript fixtures.
if [ "$CUDA" = 1 ]; then
  COMPONENTS=main,contrib,non-free
  PACKAGES=$BASE,libtorch-cuda-dev,libgloo-cuda-dev,python3-torch-cuda
  PACKAGES+=,nvidia-cuda-toolkit,nvidia-cuda-dev
else
  COMPONENTS=main
  PACKAGES=$BASE,libtorch-dev,libgloo-dev,python3-torch
fi

if [ ! -x "$DIR/usr/bin/g++" ]; then
  command -v debootstrap >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
  echo "torch2_check: debootstrap trixie into $DIR"
  debootstrap --variant=minbase --components="$COMPONENTS" --include="$BASE" \
    trixie "$DIR" "$MIRROR"
fi
echo "deb $MIRROR trixie ${COMPONENTS//,/ }" > "$DIR/etc/apt/sources.list"

# cuDNN's stand-in (see --cuda above), made from the symbols the LibTorch
# package to be installed needs (libtorch_cuda's and libtorch_python's).
cudnn_standin() {
  # shellcheck disable=SC2016
  chroot "$DIR" dpkg-query -W -f='${Status}' nvidia-cudnn 2>/dev/null |
    grep -q 'ok installed' && return 0
  echo "torch2_check: a stand-in for cuDNN (nvidia-cudnn downloads it)"
  local w=/tmp/cudnn-standin
  rm -rf "${DIR:?}$w" && mkdir -p "$DIR$w/pkg/DEBIAN" "$DIR$w/pkg/usr/lib/x86_64-linux-gnu"
  cat > "$DIR$w/pkg/DEBIAN/control" <<'CONTROL'
Package: nvidia-cudnn
Version: 9.0.0.312~strata-standin
Architecture: amd64
Maintainer: strata <strata@localhost>
Description: stand-in for cuDNN: every function LibTorch names, each an error
CONTROL
  cat > "$DIR$w/make.sh" <<'MAKE'
set -eo pipefail
cd /tmp/cudnn-standin
apt-get download -q libtorch-cuda-2.6
dpkg-deb -x libtorch-cuda-2.6_*.deb x
{ echo '/* cuDNN stand-in: never called on the CPU */'
  objdump -T x/usr/lib/x86_64-linux-gnu/libtorch_{cuda,python}.so.2.6 |
    awk '/\(libcudnn.so.9\)/ {print "int " $NF "(void) { return 1; }"}' | sort -u
} > stub.c
echo 'libcudnn.so.9 { global: *; };' > stub.map
gcc -shared -fPIC -o pkg/usr/lib/x86_64-linux-gnu/libcudnn.so.9 \
  -Wl,-soname,libcudnn.so.9 -Wl,--version-script=stub.map stub.c
dpkg-deb --build pkg nvidia-cudnn-standin.deb >/dev/null
dpkg -i nvidia-cudnn-standin.deb
MAKE
  chroot "$DIR" bash "$w/make.sh"
}

# A chroot made by an earlier version of this list gets what it lacks.
# shellcheck disable=SC2016,SC2086
missing=$(chroot "$DIR" dpkg-query -W -f='${Package} ${Status}\n' ${PACKAGES//,/ } 2>&1 |
  awk '!/install ok installed/ {print $NF}' | tr '\n' ' ' || true)
if [ -n "${missing// /}" ]; then
  echo "torch2_check: installing $missing"
  cp /etc/resolv.conf "$DIR/etc/resolv.conf"
  chroot "$DIR" apt-get update -q
  if [ "$CUDA" = 1 ]; then cudnn_standin; fi
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
  dpkg -l 'libtorch*-dev' | awk '/^ii/ {printf \"%s %s, \", \$2, \$3}'; g++ --version | head -1
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 ||
    { tail -30 build.log; exit 1; }
  ninja -C build >> build.log 2>&1 || { grep -A5 -E 'FAILED|error:' build.log | head -60; exit 1; }
  echo 'torch2_check: built'
  $data
  cd build && ctest --output-on-failure --timeout 1500 $ctest_args"
