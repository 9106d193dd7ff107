#!/usr/bin/env bash
# Readies a GPU session from this (Debian 12) machine: .gpu/ in the tree
# (ignored by git) holds what the GPU machine lacks, the Debian packages'
# files (scripts/gpu_devkit.sh) and MNIST, for bench/gpu_session.sh there.
#
#   scripts/gpu_prepare.sh DATA_DIR
#
# DATA_DIR holds mnist/ (e.g. ../shared/data). Then, on the GPU machine, two
# calls back to back, carrying .gpu (a device call lasts at most 10 minutes;
# the build stays there between them):
#   PART=build STRATA_DEVKIT=.gpu/devkit.tar.xz bash bench/gpu_session.sh .gpu/data
#   PART=table bash bench/gpu_session.sh .gpu/data
set -euo pipefail
DATA=${1:?usage: scripts/gpu_prepare.sh DATA_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$DATA/mnist" ] || { echo "gpu_prepare: no mnist/ in $DATA" >&2; exit 1; }
mkdir -p "$ROOT/.gpu/data"
if [ ! -s "$ROOT/.gpu/devkit.tar.xz" ]; then
  echo "gpu_prepare: packing the Debian packages (scripts/gpu_devkit.sh)"
  bash "$ROOT/scripts/gpu_devkit.sh" "$ROOT/.gpu/devkit.tar.xz"
fi
rm -rf "$ROOT/.gpu/data/mnist"
cp -r "$DATA/mnist" "$ROOT/.gpu/data/mnist"
chmod -R u+w "$ROOT/.gpu/data/mnist"
du -sh "$ROOT/.gpu/devkit.tar.xz" "$ROOT/.gpu/data/mnist"
total=$(du -sm "$ROOT/.gpu" | cut -f1)
# A device call carries at most 64 MiB of ignored paths.
if [ "$total" -gt 64 ]; then
  echo "gpu_prepare: .gpu is $total MiB, over the 64 MiB a device call carries" >&2
  exit 1
fi
echo "gpu_prepare: .gpu ready ($total MiB)"
