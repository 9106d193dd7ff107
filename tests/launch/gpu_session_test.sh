#!/usr/bin/env bash
# bench/gpu_session.sh's table part, on the CPU: the script a GPU session
# depends on (its minutes are too few to find a broken script there) must run
# every row and end with bench/gpu_table.py's ratios. LeNet on MNIST, 12
# steps a row, train.device = "cpu":
# - every eager row (local, 1 + 1 in process and over TCP, 2 and 4 workers,
#   2 with autograd's thread, bf16, -nopipe, 2 workers as processes) prints
#   a samples/s figure;
# - every -graph row fails with the CPU's refusal naming train.cuda_graph;
# - the ratios' table lists every row;
# - with BUDGET_S=1 every row (the peer too) is listed as skipped and the
#   script still ends with the ratios.
#
#   tests/launch/gpu_session_test.sh build/src/cli/strata
#
# Needs STRATA_DATA_DIR (MNIST). Exit 0 passed, 1 failed, 2 usage, 77
# skipped (no data).
set -uo pipefail

say() { echo "gpu_session_test: $*"; }
fail() { say "FAILED: $*"; exit 1; }

[ $# -eq 1 ] || { echo "usage: $0 STRATA_BINARY" >&2; exit 2; }
strata=$(cd "$(dirname "$1")" && pwd -P)/$(basename "$1")
[ -x "$strata" ] || { echo "gpu_session_test: $1 is not an executable" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd -P)
data=${STRATA_DATA_DIR:-}
if [ -z "$data" ] || [ ! -d "$data/mnist" ]; then
  say "SKIP: STRATA_DATA_DIR (with mnist/) not set"
  exit 77
fi
out=$(mktemp -d /tmp/strata-gpu-session-test.XXXXXX)
trap 'rm -rf "$out"' EXIT

# session BUDGET_S -> the table part's output in $out/table-BUDGET_S.txt
session() {
  PATH=/usr/bin:$PATH STRATA=$strata DEVICE=cpu STEPS=12 MULTI_STEPS=12 MODELS=lenet \
    BUDGET_S=$1 PART=table timeout 600 bash "$root/bench/gpu_session.sh" \
    "$data" "$out/build" >"$out/table-$1.txt" 2>&1
}

session 600 || { cat "$out/table-600.txt"; fail "rc=$? with the full budget"; }
t=$out/table-600.txt
for row in local sync11 async11 sync11-tcp allreduce2 sync2 allreduce4 sync4 \
    allreduce2-autograd local-bf16 sync11-nopipe allreduce2-proc; do
  grep -Eq "^lenet-$row: whole +[0-9]+ samples/s" "$t" ||
    { cat "$t"; fail "no samples/s for lenet-$row"; }
  grep -Eq "^  $row +[0-9]+\*? +[0-9.]+x" "$t" ||
    { cat "$t"; fail "the ratios' table has no figure for $row"; }
done
for row in local-graph sync11-graph async11-graph sync11-tcp-graph \
    allreduce2-graph sync2-graph allreduce4-graph sync4-graph; do
  grep -Eq "^lenet-$row: failed \(rc=1\): .*train\.cuda_graph" "$t" ||
    { cat "$t"; fail "lenet-$row did not fail with the CPU's refusal"; }
  grep -Eq "^  $row +failed" "$t" ||
    { cat "$t"; fail "the ratios' table does not list $row as failed"; }
done
say "every row ran or failed as it must ($(grep -c '^lenet-' "$t") rows)"

session 1 || { cat "$out/table-1.txt"; fail "rc=$? with BUDGET_S=1"; }
t=$out/table-1.txt
grep -q '^peer: skipped' "$t" || { cat "$t"; fail "the peer ran past the budget"; }
if grep -Eq '^lenet-[a-z0-9-]+: (whole|failed)' "$t"; then
  cat "$t"
  fail "a row ran past the budget"
fi
grep -Eq '^  sync4 +skipped' "$t" ||
  { cat "$t"; fail "the ratios' table does not list sync4 as skipped"; }
say "with BUDGET_S=1 every row is skipped, the ratios printed"
say "PASSED"
