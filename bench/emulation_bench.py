"""Heterogeneous workers (workers.*) and emulated links (net.*) in whole runs.

usage: python3 bench/emulation_bench.py BUILD_DIR [--repeats N]
Needs STRATA_DATA_DIR (MNIST). Figures are medians of --repeats runs.

1. Pacing: async, 4 workers as threads, MNIST mlp, 300 steps each, with
   workers.speed = 1,1,1,0.25: each worker's compute_s, the slow
   worker's over the others' median (the model says 4), and over its own
   unpaced compute (compute_s - paced_s).
2. Links: sync, 2 workers + 1 server, MNIST mlp (203,530 parameters,
   0.81 MB), 50 steps, at 100 Mbit/s and 1 Gbit/s with 1 ms latency: the
   run's wall time per step against the link model's steady-state period
   (three transfers through the server's interface and two latencies,
   compute left out), and the same run without net.*.
"""
import argparse
import os
import statistics
import sys
import tempfile

from mnist_run import train

PARAMS = 784 * 256 + 256 + 256 * 10 + 10


def pacing(exe, root, repeats):
    ratios, own, rows = [], [], []
    for r in range(repeats):
        s = train(exe, ["cluster.mode=async", "cluster.workers=4",
                        "cluster.servers=1", "train.iterations=300",
                        "workers.speed=1,1,1,0.25"], root, f"pace{r}")
        c = [w["compute_s"] for w in s["workers"]]
        rows.append(c)
        ratios.append(c[3] / statistics.median(c[:3]))
        slow = s["workers"][3]
        own.append(slow["compute_s"] / (slow["compute_s"] - slow["paced_s"]))
    print("1. pacing: async, 4 workers, workers.speed = 1,1,1,0.25, 300 steps")
    for r, c in enumerate(rows):
        print(f"   run {r}: compute_s " + ", ".join(f"{x:.3f}" for x in c))
    print(f"   slow worker / median of the others: median {statistics.median(ratios):.2f} "
          f"(runs: {', '.join(f'{x:.2f}' for x in ratios)}); the model says 4")
    print(f"   slow worker's compute_s / its own unpaced compute: median "
          f"{statistics.median(own):.3f} (the others share the 2 cores more "
          "while it sleeps, so their compute is slower than its own)")


def links(exe, root, repeats):
    steps = 50
    nbytes = PARAMS * 4 + 64
    print("2. links: sync, 2 workers + 1 server, mlp, 50 steps, 1 ms latency")
    print(f"   {'net':<14} {'s/step':>9} {'model s/step':>16} {'ratio':>7}")
    for rate in (0, 1e8, 1e9):
        per_step = []
        for r in range(repeats):
            sets = ["cluster.mode=sync", "cluster.workers=2", "cluster.servers=1",
                    f"train.iterations={steps}", "cluster.pipeline=false"]
            if rate:
                sets += [f"net.bandwidth_bps={rate:g}", "net.latency_ms=1"]
            s = train(exe, sets, root, f"link{rate:g}_{r}")
            per_step.append(s["train_s"] / steps)
        med = statistics.median(per_step)
        if rate:
            # In steady state the server's interface sets the period: from
            # the moment both pushes are in, its two replies leave one
            # after the other; the worker answered first pushes again
            # while the second reply is on the wire, so the next step's
            # last push arrives after three transfers and two latencies.
            model = 3 * nbytes * 8 / rate + 2 * 0.001
            print(f"   {rate/1e6:>6.0f} Mbit/s  {med:9.4f} {model:16.4f} {med/model:7.2f}")
        else:
            print(f"   {'off':<14} {med:9.4f} {'':>16} {'':>7}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if not os.environ.get("STRATA_DATA_DIR"):
        print("emulation_bench: skipped (set STRATA_DATA_DIR to the MNIST data)")
        return 0
    exe = os.path.join(a.build, "src", "cli", "strata")
    with tempfile.TemporaryDirectory() as root:
        pacing(exe, root, a.repeats)
        links(exe, root, a.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
