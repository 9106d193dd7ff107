#!/usr/bin/env bash
# Installs every Debian package strata needs, then configures the build.
# Idempotent: packages already present are not reinstalled, and apt-get update
# runs only when something is missing. Debian 12 (bookworm), Debian packages only.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache curl ca-certificates
  libtorch-dev            # LibTorch 1.13 (models, autograd)
  libopenblas0-pthread    # fast BLAS for LibTorch (the reference BLAS is ~10x slower)
  libopenblas-dev         # cblas.h + libopenblas.so for src/sharding (PCA, KMeans)
  libzmq3-dev cppzmq-dev  # transport
  libucx-dev              # UCX, for bench/ucx_bench.cc (the same-host data plane study, docs/design/transport.md)
  libgloo-dev             # collectives (all-reduce, reduce-scatter, all-gather) for the decentralized modes
  libprotobuf-dev protobuf-compiler  # TensorBoard event files (src/metrics)
  libcpp-httplib-dev      # HTTP: Prometheus /metrics on the coordinator, `strata serve`
  prometheus              # promtool and a Prometheus server for the /metrics tests
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev
  clang-format
  chromium                # headless browser for the report test (tests/experiment)
  slurm-wlm munge         # a real single-node Slurm for the srun test (tests/launch/slurm_test.sh)
  clang                   # the thread-safety pass (scripts/thread_safety.sh, -Wthread-safety)
  pybind11-dev python3-dev  # the strata Python package (src/python, docs/guide/python.md)
  python3-torch           # its tests and example: Debian's PyTorch 1.13, the same build as libtorch-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

# LibTorch must use OpenBLAS, not the reference BLAS.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "setup: warning: libblas.so.3 resolves to '$blas', not OpenBLAS; LibTorch will be slow" >&2 ;;
esac
