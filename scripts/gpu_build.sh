#!/usr/bin/env bash
# Builds strata against the CUDA LibTorch of python3's PyTorch (pip's torch
# ships its LibTorch and CMake files), on a machine that has CUDA, CMake and
# ninja but not this project's Debian packages.
#
#   scripts/gpu_build.sh [BUILD_DIR] [TARGET...]
#
# STRATA_DEVKIT may name a tar.xz of the Debian packages' files (what
# `dpkg -x` of scripts/setup.sh's libraries gives); it is unpacked to a
# private prefix (never to /) and CMake, pkg-config and the loader are pointed
# there. Without it the packages must be installed. Tests and benchmarks are
# off unless STRATA_BUILD_TESTS / STRATA_BUILD_BENCH = ON (STRATA_CMAKE_ARGS
# adds CMake arguments); test executables
# are listed when ctest runs (they need the export line below), not when they
# are linked. Prints an
# `export LD_LIBRARY_PATH=...` line on stdout (eval it before running).
set -euo pipefail

BUILD=${1:-build-cuda}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(strata)

TORCH_PREFIX=${TORCH_PREFIX:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')}
echo "gpu_build: LibTorch CMake files at $TORCH_PREFIX" >&2

PREFIXES="$TORCH_PREFIX"
EXTRA=()
RUN_LIBS=""
if [ -n "${STRATA_DEVKIT:-}" ]; then
  KIT=${STRATA_DEVKIT_DIR:-/tmp/strata-devkit}
  if [ ! -d "$KIT/usr" ]; then
    mkdir -p "$KIT"
    tar xJf "$STRATA_DEVKIT" -C "$KIT"
    # pkg-config files name /usr; point them at the private prefix.
    find "$KIT" -name '*.pc' -exec sed -i -e "s#=/usr#=$KIT/usr#g" -e "s# -I/usr/# -I$KIT/usr/#g" -e "s# -L/usr/# -L$KIT/usr/#g" {} +
  fi
  LIBS="$KIT/usr/lib/x86_64-linux-gnu:$KIT/usr/lib:$KIT/usr/lib/x86_64-linux-gnu/blas"
  # The build's own tools keep the machine's libraries: only protoc (a
  # wrapper) and the programs built later run with the packages' ones.
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LIBS" "$KIT/usr/bin/protoc" >"$KIT/protoc"
  chmod +x "$KIT/protoc"
  export PKG_CONFIG_PATH="$KIT/usr/lib/x86_64-linux-gnu/pkgconfig:$KIT/usr/lib/pkgconfig:$KIT/usr/share/pkgconfig"
  PREFIXES="$PREFIXES;$KIT/usr"
  # pip's torch/include carries its own fmt and protobuf headers; -I puts
  # the packages' headers (the ones matching the libraries linked) first.
  # -rpath-link lets the linker find the packages' libraries' own needs;
  # --no-as-needed keeps libtorch_cuda (nothing names it, the CUDA device
  # registers itself when it loads).
  EXTRA+=(-DCMAKE_LIBRARY_ARCHITECTURE=x86_64-linux-gnu
          -DProtobuf_PROTOC_EXECUTABLE="$KIT/protoc" -DCMAKE_CXX_FLAGS="-I$KIT/usr/include"
          -DCMAKE_EXE_LINKER_FLAGS="-Wl,--no-as-needed -Wl,-rpath-link,$LIBS")
  RUN_LIBS="$LIBS"
fi

# STRATA_CMAKE_ARGS: more CMake arguments (e.g. -DSTRATA_CUDA_GRAPHS=OFF).
# shellcheck disable=SC2206
EXTRA+=(${STRATA_CMAKE_ARGS:-})

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  -DSTRATA_BUILD_TESTS="${STRATA_BUILD_TESTS:-OFF}" -DSTRATA_BUILD_BENCH="${STRATA_BUILD_BENCH:-OFF}" \
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
  -DCMAKE_PREFIX_PATH="$PREFIXES" "${EXTRA[@]}" >&2
ninja -C "$BUILD" -k 0 "${TARGETS[@]}" >&2
echo "export LD_LIBRARY_PATH=${RUN_LIBS:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
