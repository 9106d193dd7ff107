#!/usr/bin/env python3
"""strata scale on MNIST (docs/design/elastic.md), threads, mlp:

1. For sync, async and allreduce: a run on 2 workers is scaled to 4, then to 3,
   while it trains. Prints the time from each request to training again (from
   summary.json "membership") and the samples/s of each of the three lives
   (from metrics.jsonl: per worker, samples over wall time within a life,
   summed over the workers).
2. Accuracy: sync, a run scaled 2 -> 4 -> 3 against a fixed 3-worker run with
   the same config, REPEATS each, alternating. Prints each run's final
   validation accuracy and the medians (the issue's bar: within 1 point).

Usage: STRATA_DATA_DIR=../shared/data bench/elastic_bench.py build [REPEATS]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
EXE = os.path.join(BUILD, "src/cli/strata")
DATA = os.path.join(os.environ.get("STRATA_DATA_DIR", "../shared/data"), "mnist")


def start(root, name, mode, workers, epochs):
    args = [EXE, "train", "-c", "examples/mnist_mlp.toml",
            "--set", f"data.dir={DATA}", "--set", f"run.dir={root}",
            "--set", f"run.name={name}", "--set", f"cluster.mode={mode}",
            "--set", f"cluster.workers={workers}", "--set", "cluster.servers=1",
            "--set", f"train.epochs={epochs}", "--set", "train.threads=1",
            "--set", "cluster.threads_per_worker=1",
            "--set", "checkpoint.every_s=3600", "--set", "eval.every_s=1000",
            "--set", "metrics.tensorboard=false",
            "--set", "data.sharding.method=stratified",
            "--set", "data.sampler=stratified"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def steps_logged(run):
    """The furthest step in metrics.jsonl (0 before any line)."""
    try:
        with open(os.path.join(run, "metrics.jsonl")) as f:
            return max((json.loads(l)["step"] for l in f if l.strip()),
                       default=0)
    except FileNotFoundError:
        return 0


def wait_for(pred, what, timeout=300):
    t0 = time.time()
    while not pred():
        if time.time() - t0 > timeout:
            raise RuntimeError(f"waited {timeout} s for {what}")
        time.sleep(0.05)


def scale(run, workers):
    subprocess.run([EXE, "scale", run, "--workers", str(workers),
                    "--timeout", "120"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def life_rates(run):
    """samples/s of each life: a worker's wall_s starts again at each life."""
    lives = [{}]  # per life: worker -> [first (wall, samples), last]
    last_wall = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            w, wall, samples = j["worker"], j["wall_s"], j["samples"]
            if w in last_wall and wall < last_wall[w]:
                if w in lives[-1]:
                    lives.append({})
            last_wall[w] = wall
            first = lives[-1].setdefault(w, [(wall, samples), None])
            first[1] = (wall, samples)
    rates = []
    for life in lives:
        total = 0.0
        for (w0, s0), (w1, s1) in life.values():
            if w1 > w0:
                total += (s1 - s0) / (w1 - w0)
        rates.append(total)
    return rates


def scaled_run(root, name, mode, epochs=4, warm_steps=400):
    run = os.path.join(root, name)
    p = start(root, name, mode, 2, epochs)
    wait_for(lambda: steps_logged(run) >= warm_steps, "2 workers to warm up")
    scale(run, 4)
    # The 4-worker life logs from the resumed step on.
    at = steps_logged(run)
    wait_for(lambda: steps_logged(run) >= at + warm_steps, "4 workers")
    scale(run, 3)
    if p.wait() != 0:
        raise RuntimeError(f"{name}: strata train exited {p.returncode}")
    with open(os.path.join(run, "summary.json")) as f:
        return run, json.load(f)


def fixed_run(root, name, epochs=4):
    p = start(root, name, "sync", 3, epochs)
    if p.wait() != 0:
        raise RuntimeError(f"{name}: strata train exited {p.returncode}")
    with open(os.path.join(root, name, "summary.json")) as f:
        return json.load(f)


def main():
    root = tempfile.mkdtemp(prefix="strata_elastic_bench_")
    print("1. scale 2 -> 4 -> 3 while training (MNIST mlp, threads)")
    print(f"{'mode':<10} {'2->4 s':>8} {'4->3 s':>8} {'samples/s on 2':>15} "
          f"{'on 4':>10} {'on 3':>10}")
    for mode in ["sync", "async", "allreduce"]:
        run, s = scaled_run(root, f"latency-{mode}", mode)
        resumed = [m for m in s["membership"] if m["event"] == "resumed"]
        lat = [m.get("since_request_s", float("nan")) for m in resumed]
        rates = life_rates(run)
        rates += [float("nan")] * (3 - len(rates))
        print(f"{mode:<10} {lat[0]:>8.2f} {lat[1]:>8.2f} {rates[0]:>15.0f} "
              f"{rates[1]:>10.0f} {rates[2]:>10.0f}", flush=True)
    print(f"\n2. accuracy, sync: scaled 2 -> 4 -> 3 vs fixed 3 workers, "
          f"{REPEATS} repeats each, alternating")
    scaled, fixed = [], []
    for r in range(REPEATS):
        _, s = scaled_run(root, f"scaled-{r}", "sync")
        scaled.append(s["final_val_acc"])
        fixed.append(fixed_run(root, f"fixed-{r}")["final_val_acc"])
        print(f"repeat {r}: scaled {scaled[-1]:.4f} (samples {s['samples']}), "
              f"fixed {fixed[-1]:.4f}", flush=True)
    ms, mf = statistics.median(scaled), statistics.median(fixed)
    print(f"median val acc: scaled {ms:.4f}, fixed {mf:.4f}, difference "
          f"{100 * (ms - mf):+.2f} points (target: within 1 point)")


if __name__ == "__main__":
    main()
