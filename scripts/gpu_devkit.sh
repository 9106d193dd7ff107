#!/usr/bin/env bash
# Packs the Debian packages strata builds against (headers, libraries,
# CMake and pkg-config files, protoc) into one tar.xz, for a GPU machine that
# has CUDA, CMake and ninja but no package registry. scripts/gpu_build.sh
# unpacks it into a private prefix there (STRATA_DEVKIT=...). Run it here, on
# Debian 12, where apt-get can download.
#
#   scripts/gpu_devkit.sh OUT.tar.xz
#
# It takes the packages below and the libraries they need, leaving out
# what any Linux with a C++ toolchain has (glibc, libstdc++, libgcc, zlib),
# and checks that every library packed finds the libraries it needs.
# Nothing is installed: `apt-get download` and `dpkg -x` into a scratch folder.
set -euo pipefail
OUT=${1:?usage: scripts/gpu_devkit.sh OUT.tar.xz}
OUT=$(realpath -m "$OUT")

# What CMakeLists.txt finds: ZeroMQ, UCX, Gloo, protobuf (+ protoc),
# cpp-httplib, toml++, CLI11, nlohmann-json, fmt, OpenBLAS (the sharding
# code's CBLAS), GoogleTest and Google Benchmark.
ROOTS=(
  libzmq3-dev cppzmq-dev libucx-dev libgloo-dev
  libprotobuf-dev protobuf-compiler libcpp-httplib-dev libtomlplusplus-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev
  libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev
  libgtest-dev libgmock-dev libbenchmark-dev
)
SKIP='^(libc6|libc6-dev|libc-dev-bin|libgcc-s1|libstdc\+\+6|libstdc\+\+-.*-dev|gcc-.*-base|zlib1g|zlib1g-dev|libcrypt1|libcrypt-dev|linux-libc-dev|libnsl.*|libtirpc.*|debconf|dpkg|perl.*|libperl.*|coreutils|tar|sensible-utils|g\+\+.*|gcc.*|cpp|cpp-[0-9]*|libgomp1|libgfortran-.*-dev|libasan.*|libtsan.*|libubsan.*|liblsan.*|libitm.*|libatomic1|libcc1-0|binutils.*|libbinutils|libctf.*|libgprofng0|libjansson4|libisl23|libmpc3|libmpfr6|libgmp10|libzstd1|libsframe1|libtinfo6|libncursesw6|libc-bin|libsystemd0|libudev1|libcap2|libselinux1|libpcre2-8-0|liblz4-1|liblzma5|libgcrypt20|libgpg-error0|libdb5.3|libaudit.*|libbz2-1.0|libsemanage.*|libsepol2|libpam.*|libacl1|libattr1|libuuid1|libblkid1|libmount1|adduser|cdebconf|install-info|passwd|libdebian-installer4|libnewt.*|libslang2|libtextwrap1|readline-common|libreadline8|libpam.*|libcap-ng0|libopenblas0-openmp|libopenblas0-serial|libopenblas-openmp-dev|libopenblas-serial-dev|libicu-dev|icu-devtools|libxml2-dev|libxml2|libicu72)$'

WORK=$(mktemp -d /tmp/strata-devkit.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# The roots and every package they depend on (Depends and PreDepends), once.
mapfile -t ALL < <(apt-cache depends --recurse --no-recommends --no-suggests \
  --no-conflicts --no-breaks --no-replaces --no-enhances "${ROOTS[@]}" |
  grep -v '^ ' | grep -v '^<' | sed 's/:any$//' | sort -u | grep -Ev "$SKIP")
for r in "${ROOTS[@]}"; do
  printf '%s\n' "${ALL[@]}" | grep -qx "$r" || {
    echo "gpu_devkit: package $r not found by apt-cache (apt-get update?)" >&2
    exit 1
  }
done
echo "gpu_devkit: ${#ALL[@]} packages" >&2
(cd "$WORK" && apt-get download "${ALL[@]}" >/dev/null)
mkdir -p "$WORK/root"
for deb in "$WORK"/*.deb; do dpkg -x "$deb" "$WORK/root"; done
# Documentation, manual pages and locale files are not needed to build.
rm -rf "$WORK/root/usr/share/doc" "$WORK/root/usr/share/man" \
  "$WORK/root/usr/share/locale" "$WORK/root/usr/share/lintian"
# Everything links shared, except the test and benchmark frameworks.
find "$WORK/root" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' \
  ! -name 'libbenchmark*' -delete
# Every library a packed library needs is packed too, or is one that any
# Linux with a C++ toolchain has.
BASE='^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libz|ld-linux-x86-64|libcrypt|libresolv)\.so'
# (readelf fails on the linker scripts some packages name lib*.so.)
missing=$({ find "$WORK/root" -name '*.so*' -type f -exec readelf -d {} + 2>/dev/null || true; } |
  sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | sort -u | grep -Ev "$BASE" |
  while read -r lib; do
    [ -n "$(find "$WORK/root" -name "$lib" -print -quit)" ] || echo "$lib"
  done)
if [ -n "$missing" ]; then
  echo "gpu_devkit: packed libraries need what is not packed: $(echo $missing)" >&2
  exit 1
fi
# update-alternatives is not run: point the generic OpenBLAS names at the
# pthread build (what scripts/setup.sh installs), for the sharding code's CBLAS.
L=$WORK/root/usr/lib/x86_64-linux-gnu
ln -sf openblas-pthread/libopenblas.so "$L/libopenblas.so"
ln -sf openblas-pthread/libopenblas.so.0 "$L/libopenblas.so.0"
ln -sf x86_64-linux-gnu/openblas-pthread/cblas.h "$WORK/root/usr/include/cblas.h"
ln -sf x86_64-linux-gnu/openblas-pthread/openblas_config.h "$WORK/root/usr/include/openblas_config.h"
tar cJf "$OUT" -C "$WORK/root" .
echo "gpu_devkit: wrote $OUT ($(du -h "$OUT" | cut -f1))" >&2
