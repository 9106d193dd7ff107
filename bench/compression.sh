#!/bin/bash
# cluster.compression on MNIST: LeNet, 2 servers + 4 workers, async, over
# loopback TCP (cluster.transport = "tcp"), for none / fp16 / int8, REPS
# times side by side (one seed per rep, the same for the three codecs).
# Prints per run: bytes per worker step (pushed, pulled, both), samples/s
# and final validation accuracy; then the medians, each codec's byte ratio
# against none, and its median accuracy difference in points.
# bench/compression.sh [BUILD_DIR] [REPS]; EPOCHS (default 1); needs
# STRATA_DATA_DIR.
set -euo pipefail
build="$(cd "${1:-build}" && pwd)"
reps="${2:-3}"
data="$(cd "${STRATA_DATA_DIR:?set STRATA_DATA_DIR}" && pwd)"
here="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d /tmp/strata_compression_XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
export OPENBLAS_NUM_THREADS=1
for i in $(seq 1 "$reps"); do
  for codec in none fp16 int8; do
    "$build/src/cli/strata" train -c "$here/examples/mnist_lenet_cluster.toml" \
      --set "data.dir=$data/mnist" --set "train.epochs=${EPOCHS:-1}" \
      --set cluster.transport=tcp --set "cluster.compression=$codec" \
      --set "run.seed=$i" --set eval.every_s=1000 --set run.log_level=warning \
      --set "run.name=$codec-$i" > /dev/null
    echo "rep $i $codec done" >&2
  done
done
/usr/bin/python3 - "$reps" <<'EOF'
import json, statistics, sys
reps = int(sys.argv[1])
rows = {}
for codec in ("none", "fp16", "int8"):
    for i in range(1, reps + 1):
        s = json.load(open(f"runs/{codec}-{i}/summary.json"))
        steps = sum(w["iterations"] for w in s["workers"])
        push = sum(w["bytes_pushed"] for w in s["workers"]) / steps
        pull = sum(w["bytes_pulled"] for w in s["workers"]) / steps
        r = dict(push=push, pull=pull, both=push + pull,
                 sps=s["samples_per_s"], acc=100 * s["final_val_acc"])
        rows.setdefault(codec, []).append(r)
        print(f"{codec:5s} rep {i}: pushed {push/1e3:7.1f} KB/step  pulled "
              f"{pull/1e3:7.1f} KB/step  both {r['both']/1e3:7.1f} KB/step  "
              f"{r['sps']:7.0f} samples/s  val acc {r['acc']:.2f} %")
med = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
       for c, rs in rows.items()}
print()
print("codec | pushed KB/step | pulled KB/step | both KB/step | bytes vs none "
      "(pushed / both) | samples/s | val acc % | acc - none (points, median "
      "of per-rep differences)")
for c in ("none", "fp16", "int8"):
    m, n = med[c], med["none"]
    d = statistics.median(a["acc"] - b["acc"]
                          for a, b in zip(rows[c], rows["none"]))
    print(f"{c} | {m['push']/1e3:.1f} | {m['pull']/1e3:.1f} | "
          f"{m['both']/1e3:.1f} | {m['push']/n['push']:.3f} / "
          f"{m['both']/n['both']:.3f} | {m['sps']:.0f} | {m['acc']:.2f} | "
          f"{d:+.2f}")
EOF
