#!/usr/bin/env bash
# Runs every benchmark in bench/ and prints its figures.
set -euo pipefail
build="${1:-build}"
for b in "$build"/bench/*_bench; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b"
done
