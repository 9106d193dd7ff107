#!/usr/bin/env bash
# strata allreduce vs PyTorch DDP (gloo, CPU), side by side in one run.
#
# Usage: STRATA_DATA_DIR=DIR bench/ddp_bench.sh [build_dir]
#   DIR holds mnist/ (the four IDX files, possibly .gz). build_dir defaults to
#   "build" (the strata binary is build_dir/src/cli/strata).
#
# Both sides train the same MLP (784-HIDDEN-10, ReLU) on MNIST with WORKERS
# processes, global batch BATCH split into BATCH/WORKERS per process, STEPS
# steps per process, SGD (LR, MOMENTUM, SCHEDULE), pixels standardised with
# MNIST's mean / std, "mod" sharding, the official 10k test set as validation,
# one compute thread per process. The DDP side is bench/ddp_compare.py, run
# with /usr/bin/python3 (Debian's python3-torch); its header lists what is
# not identical between the two sides (mainly: what train_s covers).
# Repeats alternate strata, DDP, strata, DDP, ...; repeat i uses seed i on
# both sides.
#
# Environment (defaults): REPS=3 STEPS=600 BATCH=128 WORKERS=2 HIDDEN=256
#   LR=0.1 MOMENTUM=0.9 SCHEDULE=cosine (examples/mnist_mlp.toml's values)
#   STRATA_EVALUATOR=false: strata's periodic evaluator (cluster.evaluator);
#     off by default because the DDP side evaluates only the final model.
#   RUN_TIMEOUT=900: seconds allowed for one training run of either side.
#
# Targets: strata samples/s / DDP samples/s (medians) >= 1.0; final validation
# accuracy within 0.3 points. strata's samples/s is its summary.json figure
# (samples / train_s; train_s runs from the coordinator's barrier 0, when every
# worker has started, loaded its data and connected, to the last worker's end,
# and setup_s is reported apart; the DDP side likewise times from a barrier
# after data loading to the slowest rank's last step); the table also
# shows strata's loop-only rate, samples / max over workers of
# (compute_s + comm_s), for a like-for-like view of the training loop.
#
# Prints "skipped: ..." and exits 0 when /usr/bin/python3 cannot import torch
# or STRATA_DATA_DIR is not set (or has no mnist/).
set -euo pipefail

build="${1:-build}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
py=/usr/bin/python3

if [ ! -x "$py" ] || ! "$py" -c 'import torch, torch.distributed' >/dev/null 2>&1; then
  echo "skipped: $py cannot import torch (install Debian's python3-torch)"
  exit 0
fi
if [ -z "${STRATA_DATA_DIR:-}" ]; then
  echo "skipped: STRATA_DATA_DIR is not set (the directory containing mnist/)"
  exit 0
fi
data="$STRATA_DATA_DIR/mnist"
if [ ! -d "$data" ]; then
  echo "skipped: $data does not exist"
  exit 0
fi
strata="$build/src/cli/strata"
if [ ! -x "$strata" ]; then
  echo "ddp_bench: no strata binary at $strata (build it, or pass the build directory)" >&2
  exit 1
fi
strata="$(cd "$(dirname "$strata")" && pwd)/strata"

REPS="${REPS:-3}"
STEPS="${STEPS:-600}"
BATCH="${BATCH:-128}"
WORKERS="${WORKERS:-2}"
HIDDEN="${HIDDEN:-256}"
LR="${LR:-0.1}"
MOMENTUM="${MOMENTUM:-0.9}"
SCHEDULE="${SCHEDULE:-cosine}"
STRATA_EVALUATOR="${STRATA_EVALUATOR:-false}"
RUN_TIMEOUT="${RUN_TIMEOUT:-900}"
for v in REPS STEPS BATCH WORKERS HIDDEN RUN_TIMEOUT; do
  if ! [[ "${!v}" =~ ^[1-9][0-9]*$ ]]; then
    echo "ddp_bench: $v='${!v}' is not a positive integer" >&2
    exit 1
  fi
done
if [ "$REPS" -gt 100 ]; then
  echo "ddp_bench: REPS=$REPS: at most 100" >&2
  exit 1
fi
if [ "$BATCH" -lt "$WORKERS" ]; then
  echo "ddp_bench: BATCH=$BATCH cannot be split over WORKERS=$WORKERS" >&2
  exit 1
fi

# One compute thread per process on both sides.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

tmp="$(mktemp -d "${TMPDIR:-/tmp}/strata_ddp_bench.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
results="$tmp/results.tsv"
: >"$results"

run_strata() {  # seed -> one TSV row on stdout
  local seed="$1" name="strata-$1" log="$tmp/strata-$1.log"
  if ! timeout --kill-after=10 "$RUN_TIMEOUT" "$strata" train --processes \
      -c "$root/examples/mnist_mlp.toml" \
      --set data.dataset=mnist --set "data.dir=$data" \
      --set data.normalize=true --set data.augment=false \
      --set data.sharding.method=mod --set data.sampler=shuffle \
      --set data.shuffle=true \
      --set model.name=mlp --set "model.hidden=$HIDDEN" \
      --set cluster.mode=allreduce --set "cluster.workers=$WORKERS" \
      --set cluster.adapt_hyperparams=true \
      --set cluster.threads_per_worker=1 \
      --set "cluster.evaluator=$STRATA_EVALUATOR" \
      --set train.optimizer=sgd --set "train.lr=$LR" \
      --set "train.momentum=$MOMENTUM" --set train.nesterov=false \
      --set train.weight_decay=0 --set "train.schedule=$SCHEDULE" \
      --set train.warmup_steps=0 --set train.min_lr=0 \
      --set "train.batch_size=$BATCH" --set "train.iterations=$STEPS" \
      --set train.eval_batch_size=1000 \
      --set "run.seed=$seed" --set "run.dir=$tmp/runs" \
      --set "run.name=$name" >"$log" 2>&1; then
    echo "ddp_bench: strata run (seed $seed) failed; its log ends:" >&2
    tail -n 20 "$log" >&2
    return 1
  fi
  "$py" - "$tmp/runs/$name/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
loop = max((w.get("compute_s", 0) + w.get("comm_s", 0)) for w in s["workers"])
print("%.3f\t%.6f\t%.4f\t%d\t%.3f" % (
    s["samples_per_s"], s["final_val_acc"], s["train_s"], s["steps"],
    s["samples"] / loop if loop > 0 else 0.0))
EOF
}

run_ddp() {  # seed -> one TSV row on stdout
  local seed="$1" log="$tmp/ddp-$1.log" out="$tmp/ddp-$1.json"
  if ! timeout --kill-after=10 "$RUN_TIMEOUT" "$py" "$here/ddp_compare.py" \
      --data-dir "$data" --world-size "$WORKERS" --batch "$BATCH" \
      --steps "$STEPS" --hidden "$HIDDEN" --lr "$LR" --momentum "$MOMENTUM" \
      --schedule "$SCHEDULE" --eval-batch 1000 --seed "$seed" \
      --timeout "$RUN_TIMEOUT" >"$out" 2>"$log"; then
    echo "ddp_bench: DDP run (seed $seed) failed; its log ends:" >&2
    tail -n 20 "$log" >&2
    return 1
  fi
  "$py" - "$out" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
s = json.loads(lines[-1])
print("%.3f\t%.6f\t%.4f\t%d" % (
    s["samples_per_s"], s["final_val_acc"], s["train_s"], s["steps"]))
EOF
}

echo "strata allreduce vs PyTorch DDP (gloo): MNIST MLP 784-$HIDDEN-10, $WORKERS processes," \
  "global batch $BATCH ($((BATCH / WORKERS)) per process), $STEPS steps per process," \
  "SGD lr $LR momentum $MOMENTUM schedule $SCHEDULE, $REPS repeat(s)," \
  "strata cluster.evaluator=$STRATA_EVALUATOR"
for ((i = 1; i <= REPS; i++)); do
  s_row="$(run_strata "$i")"
  d_row="$(run_ddp "$i")"
  printf '%d\t%s\t%s\n' "$i" "$s_row" "$d_row" >>"$results"
done

"$py" - "$results" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
# rep | strata sps, acc, train_s, steps, loop sps | ddp sps, acc, train_s, steps
hdr = ("rep", "strata samples/s", "strata acc %", "strata train_s",
       "strata loop samples/s", "DDP samples/s", "DDP acc %", "DDP train_s",
       "steps s/D")
fmt = "%-6s %16s %12s %14s %21s %13s %9s %11s %9s"
print(fmt % hdr)
S, SA, SL, D, DA, ST, DT = [], [], [], [], [], [], []
for r in rows:
    s, sa, st, ss, sl = float(r[1]), float(r[2]) * 100, float(r[3]), r[4], float(r[5])
    d, da, dt, ds = float(r[6]), float(r[7]) * 100, float(r[8]), r[9]
    S.append(s); SA.append(sa); SL.append(sl); D.append(d); DA.append(da)
    ST.append(st); DT.append(dt)
    print(fmt % (r[0], "%.0f" % s, "%.2f" % sa, "%.2f" % st, "%.0f" % sl,
                 "%.0f" % d, "%.2f" % da, "%.2f" % dt, "%s/%s" % (ss, ds)))
m = statistics.median
print(fmt % ("median", "%.0f" % m(S), "%.2f" % m(SA), "%.2f" % m(ST),
             "%.0f" % m(SL), "%.0f" % m(D), "%.2f" % m(DA), "%.2f" % m(DT), ""))
ratio = m(S) / m(D) if m(D) > 0 else float("nan")
loop_ratio = m(SL) / m(D) if m(D) > 0 else float("nan")
diff = m(SA) - m(DA)
print("ratio strata/DDP of median samples/s: %.3f (target >= 1.0: %s)"
      % (ratio, "met" if ratio >= 1.0 else "NOT met"))
print("final accuracy strata - DDP (medians): %+.2f points (target |diff| <= 0.3: %s)"
      % (diff, "met" if abs(diff) <= 0.3 else "NOT met"))
print("for information, strata loop-only samples/s / DDP samples/s (medians): %.3f"
      % loop_ratio)
EOF
