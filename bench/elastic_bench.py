#!/usr/bin/env python3
"""strata scale on MNIST (docs/design/elastic.md), mlp:

1. For sync, async and allreduce, threads and --processes: a run on 2 workers
   is scaled to 4, then to 3, while it trains. Prints the time from each
   request to training again (from summary.json "membership") and the
   samples/s of each of the three lives (from metrics.jsonl: per worker,
   samples over wall time within a life, summed over the workers); with
   --processes, how many processes each change kept.
1b. --processes, sync: worker 1 of 3 drained (strata scale --drain 1), and
   worker 1 of 3 killed with cluster.leave_on_loss: the time to train again
   on the other two, in their processes.
1c. Threads, the other mode families: gossip, tree-easgd, and sync and async
   fed by the data service (static and dynamic assignment): the same table,
   and for the data service, from served.jsonl, whether every example was
   trained exactly once in every epoch across both changes.
1d. The data servers: sync (static) and async (dynamic) fed by the data
   service, scaled 2 -> 4 -> 3 workers with 1 -> 2 -> 3 (sync) or 1 -> 2 -> 1
   (async) data servers (`--data-servers`), with the exactly-once check.
1e. A worker started by hand: a --processes sync run of 2 workers joined
   through its run directory (`strata node --join RUN_DIR`), and one joined
   by a worker bound at 127.0.0.2 with its own run directory through the
   control endpoint (`strata node --join tcp://...`), side by side; one BLAS
   thread each, as the launcher gives its own children on this 2-core
   machine: the time from the request to training again on 3, the
   samples/s of both lives.
2. Accuracy: sync, a run scaled 2 -> 4 -> 3 against a fixed 3-worker run with
   the same config, REPEATS each, alternating. Prints each run's final
   validation accuracy and the medians (the issue's bar: within 1 point).

Usage: STRATA_DATA_DIR=../shared/data bench/elastic_bench.py build [REPEATS]
       [PARTS]   (PARTS: a comma list of 1,1b,1c,1d,1e,2; default all)
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
PARTS = (sys.argv[3] if len(sys.argv) > 3 else "1,1b,1c,1d,1e,2").split(",")
EXE = os.path.join(BUILD, "src/cli/strata")
DATA = os.path.join(os.environ.get("STRATA_DATA_DIR", "../shared/data"), "mnist")


def start(root, name, mode, workers, epochs, processes=False, extra=()):
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
    if processes:
        args.insert(2, "--processes")
    for kv in extra:
        args += ["--set", kv]
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


def scale(run, workers, drain=None, data_servers=None):
    how = ["--drain", str(drain)] if drain is not None else [
        "--workers", str(workers)]
    if data_servers is not None:
        how += ["--data-servers", str(data_servers)]
    subprocess.run([EXE, "scale", run] + how + ["--timeout", "120"],
                   check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def life_rates(run):
    """samples/s of each life: a worker's wall_s starts again at each life.
    A worker that joined from elsewhere sends its lines to the coordinator
    (cluster.forward_metrics): they are in the run's file too."""
    lives = [{}]  # per life: worker -> [first (wall, samples), last]
    last_wall = {}
    text = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        text += f.readlines()
    for line in text:
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


def scaled_run(root, name, mode, epochs=4, warm_steps=400, processes=False,
               extra=(), data_servers=(None, None)):
    run = os.path.join(root, name)
    p = start(root, name, mode, 2, epochs, processes, extra)
    wait_for(lambda: steps_logged(run) >= warm_steps, "2 workers to warm up")
    scale(run, 4, data_servers=data_servers[0])
    # The 4-worker life logs from the resumed step on.
    at = steps_logged(run)
    wait_for(lambda: steps_logged(run) >= at + warm_steps, "4 workers")
    scale(run, 3, data_servers=data_servers[1])
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


def leave_run(root, name, how):
    """--processes sync on 3 workers; worker 1 drained or killed after 400
    steps. Returns (seconds from the request or the kill to training again,
    processes kept, samples, expected samples)."""
    run = os.path.join(root, name)
    # A lost worker leaves from the newest checkpoint: one every 100 steps.
    extra = ["cluster.leave_on_loss=true", "cluster.heartbeat_timeout_ms=1000",
             "cluster.heartbeat_interval_ms=100",
             "checkpoint.every_updates=100"] if how == "kill" else []
    p = start(root, name, "sync", 3, 2, True, extra)
    wait_for(lambda: steps_logged(run) >= 400, "3 workers to warm up")
    t0 = time.time()
    if how == "drain":
        scale(run, 0, drain=1)
    else:
        with open(os.path.join(run, "pids.json")) as f:
            os.kill(json.load(f)["worker 1 (node 3)"], 9)
    if p.wait() != 0:
        raise RuntimeError(f"{name}: strata train exited {p.returncode}")
    with open(os.path.join(run, "summary.json")) as f:
        s = json.load(f)
    resumed = [m for m in s["membership"] if m["event"] == "resumed"][0]
    kept = [m for m in s["membership"] if m["event"] == "processes"][0]
    return (resumed["training_unix"] - t0, len(kept["kept_pids"]),
            s["samples"], 2 * 60000)


def served_once(run, epochs):
    """From served.jsonl (full ids): whether every epoch below `epochs`
    served every example exactly once, as 'yes' or what went wrong."""
    seen = {}
    with open(os.path.join(run, "served.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            seen.setdefault(j["epoch"], []).extend(j["ids"])
    for e in range(epochs):
        ids = seen.get(e, [])
        if len(ids) != 60000 or len(set(ids)) != 60000:
            return f"no: epoch {e} {len(ids)} served, {len(set(ids))} distinct"
    return "yes"


# Part 1c's rows: (label, mode, extra settings, served log to check).
FAMILIES = [
    ("gossip", "gossip", [], False),
    ("tree-easgd", "tree-easgd", [], False),
    ("sync+data", "sync", ["cluster.data_servers=1", "data.served_log=ids"],
     True),
    ("async+data", "async", ["cluster.data_servers=1",
                             "data.assignment=dynamic",
                             "data.served_log=ids"], True),
]


# Part 1d's rows: the same, with the data servers' count changed too.
DATA_SERVER_ROWS = [
    ("sync+ds1>2>3", "sync", ["cluster.data_servers=1", "data.served_log=ids"],
     True, (2, 3)),
    ("async+ds1>2>1", "async", ["cluster.data_servers=1",
                                "data.assignment=dynamic",
                                "data.served_log=ids"], True, (2, 1)),
]


def latency_table(root, processes, rows=None, part=None):
    launch = "--processes" if processes else "threads"
    part = part or ("1c" if rows else "1")
    rows = rows or [(m, m, [], False) for m in ["sync", "async", "allreduce"]]
    print(f"\n{part}. scale 2 -> 4 -> 3 while training (MNIST mlp, {launch})")
    print(f"{'mode':<14} {'2->4 s':>8} {'4->3 s':>8} {'samples/s on 2':>15} "
          f"{'on 4':>10} {'on 3':>10} {'processes kept':>15} {'state':>13}"
          + (f" {'once per epoch':>15}" if part != "1" else ""))
    for row in rows:
        label, mode, extra, served = row[:4]
        run, s = scaled_run(root, f"latency-{label}-{launch}", mode,
                            processes=processes, extra=extra,
                            data_servers=row[4] if len(row) > 4
                            else (None, None))
        resumed = [m for m in s["membership"] if m["event"] == "resumed"]
        lat = [m.get("since_request_s", float("nan")) for m in resumed]
        kept = "/".join(f"{len(m['kept_pids'])}+{len(m['started_pids'])}"
                        f"-{len(m['ended_pids'])}"
                        for m in s["membership"] if m["event"] == "processes")
        rates = life_rates(run)
        rates += [float("nan")] * (3 - len(rates))
        once = f" {served_once(run, 4) if served else '-':>15}" \
            if part != "1" else ""
        state = "/".join(m.get("state_from", "?") for m in resumed)
        print(f"{label:<14} {lat[0]:>8.2f} {lat[1]:>8.2f} {rates[0]:>15.0f} "
              f"{rates[1]:>10.0f} {rates[2]:>10.0f} {kept or '-':>15} "
              f"{state:>13}{once}", flush=True)


def join_run(root, remote):
    """A --processes sync run of 2 joined by a worker started by hand: from
    127.0.0.2 through the control endpoint (`remote`), or on this machine
    through the run directory. The time to training again on 3, samples/s
    on 2 and on 3, the joined count, the samples."""
    name = "join-remote" if remote else "join-local"
    run = os.path.join(root, name)
    p = start(root, name, "sync", 2, 4, processes=True,
              extra=["cluster.control_address=tcp://127.0.0.1:*",
                     "cluster.max_workers=3"])
    wait_for(lambda: steps_logged(run) >= 400, "2 workers to warm up")
    if remote:
        with open(os.path.join(run, "control.json")) as f:
            endpoint = json.load(f)["endpoint"]
        how = ["--join", endpoint, "--bind", "tcp://127.0.0.2:*",
               "--run-dir", os.path.join(root, "away"),
               "--set", f"data.dir={DATA}"]
    else:
        how = ["--join", run]
    joiner = subprocess.Popen(
        [EXE, "node"] + how, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if p.wait() != 0 or joiner.wait() != 0:
        raise RuntimeError(f"{name}: exits {p.returncode}, {joiner.returncode}")
    with open(os.path.join(run, "summary.json")) as f:
        s = json.load(f)
    resumed = [m for m in s["membership"] if m["event"] == "resumed"]
    procs = [m for m in s["membership"] if m["event"] == "processes"]
    joined = len(procs[0].get("joined_remote" if remote else "joined_pids",
                              [])) if procs else 0
    rates = life_rates(run) + [float("nan")] * 2
    return (resumed[0].get("since_request_s", float("nan")), rates[0],
            rates[1], joined, s["samples"])


def join_table(root):
    print("\n1e. a worker started by hand joins (--processes sync, 2 -> 3)")
    print(f"{'how':<34} {'to training again s':>20} {'samples/s on 2':>15} "
          f"{'on 3':>10} {'joined':>7} {'samples':>9}")
    for remote, label in [(False, "--join RUN_DIR (this machine)"),
                          (True, "--join tcp://... from 127.0.0.2")]:
        secs, r2, r3, joined, samples = join_run(root, remote)
        print(f"{label:<34} {secs:>20.2f} {r2:>15.0f} {r3:>10.0f} "
              f"{joined:>7} {samples:>9}", flush=True)


def main():
    root = tempfile.mkdtemp(prefix="strata_elastic_bench_")
    if "1" in PARTS:
        latency_table(root, processes=False)
        latency_table(root, processes=True)
    if "1b" in PARTS:
        leave_table(root)
    if "1c" in PARTS:
        latency_table(root, processes=False, rows=FAMILIES)
    if "1d" in PARTS:
        latency_table(root, processes=False, rows=DATA_SERVER_ROWS, part="1d")
    if "1e" in PARTS:
        join_table(root)
    if "2" in PARTS:
        accuracy_table(root)


def leave_table(root):
    print("\n1b. --processes sync, 3 workers, worker 1 leaves after 400 steps")
    print(f"{'how':<28} {'to training again s':>20} {'kept':>5} "
          f"{'samples':>9} {'expected':>9}")
    for how, label in [("drain", "strata scale --drain 1"),
                       ("kill", "SIGKILL, leave_on_loss")]:
        secs, kept, samples, expected = leave_run(root, f"leave-{how}", how)
        print(f"{label:<28} {secs:>20.2f} {kept:>5} {samples:>9} "
              f"{expected:>9}", flush=True)


def accuracy_table(root):
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
