"""strata's CPU defaults against the best setting measured, side by side
(issue: fast out of the box on the CPU).

usage: python3 bench/cpu_defaults.py BUILD_DIR [--repeats N] [--confirm N]
                                     [--tables 1,2,3]
Needs STRATA_DATA_DIR (MNIST) for mlp and lenet; resnet20 runs on
synthetic 3x32x32 images. OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS and
OMP_NUM_THREADS are removed from the runs' environment except where a row
sets one: "default" is what a new user gets.

Tables:
1. Training samples/s, local trainer: the default (train.threads = 0, BLAS
   threads chosen by strata) against every combination of train.threads in
   {1, cores} and OPENBLAS_NUM_THREADS in {1, cores}. The sweep picks the
   best setting; then --confirm fresh pairs of runs, default and that
   setting alternating, give default / best. The ratio is not taken from the
   sweep itself: the largest of several noisy medians is biased upwards
   (measured: a default identical to the best setting came out at 0.84-0.88
   of it in the sweep, 0.98-1.15 in alternating pairs).
2. A 100-step LeNet run's wall time with the default evaluation batch
   against train.eval_batch_size in {64, 128, 256, 512, 1000}.
3. 4 workers as threads, MNIST mlp, 1 epoch: allreduce (collectives
   through memory, the default), allreduce over Gloo, sync PS, in
   max(--repeats, --confirm) rounds. allreduce / sync is given twice: as the
   ratio of the medians, and as the median of the rounds' own ratios (each
   round's allreduce and sync ran back to back, so a slow spell of the
   machine hits both).
Runs alternate between settings; figures are medians of --repeats.
--tables picks which tables run (all three by default).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CORES = os.cpu_count() or 1
CLEAN = {k: v for k, v in os.environ.items()
         if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                      "OMP_NUM_THREADS")}


def run(exe, args, env_extra, root, name):
    env = dict(CLEAN, **env_extra)
    t = time.perf_counter()
    subprocess.run([exe, "train"] + args + [
        "--set", f"run.dir={root}", "--set", f"run.name={name}",
        "--set", "metrics.tensorboard=false"], check=True, env=env,
        capture_output=True)
    wall = time.perf_counter() - t
    with open(os.path.join(root, name, "summary.json")) as f:
        return json.load(f)["samples_per_s"], wall


def median_table(exe, settings, repeats, root, tag, runs=None):
    """settings: [(label, args, env)] -> {label: (median samples/s,
    median wall)}; with `runs` (a dict), runs[label] = every run's
    samples/s in order."""
    got = {label: ([], []) for label, _, _ in settings}
    for i in range(repeats):
        order = settings if i % 2 == 0 else list(reversed(settings))
        for label, args, env in order:
            s, w = run(exe, args, env, root, f"{tag}-{len(got[label][0])}-"
                       f"{label.replace(' ', '_').replace('=', '')}-{i}")
            got[label][0].append(s)
            got[label][1].append(w)
    if runs is not None:
        runs.update({k: v[0] for k, v in got.items()})
    return {k: (statistics.median(v[0]), statistics.median(v[1]))
            for k, v in got.items()}


def threads_rows(exe, name, args, repeats, confirm, root):
    settings = [("default", args, {})]
    for t in sorted({1, CORES}):
        for b in sorted({1, CORES}):
            settings.append((f"threads={t} BLAS={b}",
                             args + ["--set", f"train.threads={t}"],
                             {"OPENBLAS_NUM_THREADS": str(b)}))
    m = median_table(exe, settings, repeats, root, name)
    best = max((v[0], k) for k, v in m.items() if k != "default")
    chosen = next(s for s in settings if s[0] == best[1])
    pair = [("default", args, {}), ("best", chosen[1], chosen[2])]
    c = median_table(exe, pair, confirm, root, name + "-confirm")
    d, b = c["default"][0], c["best"][0]
    print(f"| {name} | {d:,.0f} | {b:,.0f} ({best[1]}) | {d / b:.2f} | "
          + ", ".join(f"{k}: {v[0]:,.0f}" for k, v in m.items()) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--confirm", type=int, default=5,
                    help="alternating pairs of default and best after the "
                    "sweep (the table's first three figures)")
    ap.add_argument("--tables", default="1,2,3",
                    help="which tables to run, comma-separated")
    a = ap.parse_args()
    try:
        tables = {int(t) for t in a.tables.split(",") if t.strip()}
    except ValueError:
        tables = set()
    if not tables or not tables <= {1, 2, 3}:
        ap.error(f"--tables: {a.tables!r}; tables are 1, 2 and 3, "
                 "comma-separated")
    exe = os.path.join(a.build, "src", "cli", "strata")
    data = os.environ.get("STRATA_DATA_DIR")
    if not data:
        print("cpu_defaults: skipped (needs STRATA_DATA_DIR for MNIST)")
        return 0
    mnist = ["--set", f"data.dir={data}/mnist"]
    root = tempfile.mkdtemp(prefix="strata-cpu-defaults-")
    here = os.path.dirname(os.path.abspath(__file__))
    ex = os.path.join(here, "..", "examples")
    if 1 in tables:
        print(f"{CORES} cores; sweep: {a.repeats} runs per setting, "
              f"alternating; then {a.confirm} alternating pairs of default "
              "and the sweep's best; medians\n")
        print("| model | default samples/s (pairs) | best samples/s (pairs; "
              "setting) | default / best (pairs) | sweep, every setting |")
        print("| --- | --- | --- | --- | --- |")
        threads_rows(exe, "mlp", ["-c", os.path.join(ex, "mnist_mlp.toml")]
                     + mnist + ["--set", "train.epochs=1"], a.repeats,
                     a.confirm, root)
        threads_rows(exe, "lenet",
                     ["-c", os.path.join(ex, "mnist_lenet.toml")] + mnist
                     + ["--set", "train.iterations=300",
                        "--set", "cluster.mode=local"], a.repeats,
                     a.confirm, root)
        threads_rows(exe, "resnet20", [
            "--set", "model.name=resnet20", "--set", "cluster.mode=local",
            "--set", "data.synthetic.shape=3x32x32", "--set",
            "data.synthetic.train_size=2000", "--set",
            "data.synthetic.val_size=500", "--set", "train.batch_size=128",
            "--set", "train.iterations=60"], a.repeats, a.confirm, root)

    if 2 in tables:
        lenet = ["-c", os.path.join(ex, "mnist_lenet.toml")] + mnist + [
            "--set", "train.iterations=100", "--set", "cluster.mode=local"]
        settings = [("default", lenet, {})] + [
            (f"eval_batch_size={b}",
             lenet + ["--set", f"train.eval_batch_size={b}"], {})
            for b in (64, 128, 256, 512, 1000)]
        m = median_table(exe, settings, a.repeats, root, "eval")
        best = min((v[1], k) for k, v in m.items() if k != "default")
        print(f"\n100-step LeNet, wall s: default {m['default'][1]:.2f}, best "
              f"{best[0]:.2f} ({best[1]}), default / best "
              f"{m['default'][1] / best[0]:.2f}; " + ", ".join(
                  f"{k}: {v[1]:.2f}" for k, v in m.items() if k != "default"))

    if 3 in tables:
        mlp4 = ["-c", os.path.join(ex, "mnist_mlp.toml")] + mnist + [
            "--set", "train.epochs=1", "--set", "cluster.workers=4"]
        # allreduce and sync next to each other in both orders.
        settings = [
            ("allreduce", mlp4 + ["--set", "cluster.mode=allreduce"], {}),
            ("sync", mlp4 + ["--set", "cluster.mode=sync"], {}),
            ("allreduce gloo", mlp4 + ["--set", "cluster.mode=allreduce",
                                       "--set", "cluster.collective=gloo"],
             {}),
        ]
        runs = {}
        m = median_table(exe, settings, max(a.repeats, a.confirm), root,
                         "modes", runs)
        rounds = statistics.median(
            x / y for x, y in zip(runs["allreduce"], runs["sync"]))
        print(f"\n4 workers as threads, MNIST mlp, 1 epoch, samples/s: "
              f"allreduce (memory) {m['allreduce'][0]:,.0f}, allreduce (Gloo) "
              f"{m['allreduce gloo'][0]:,.0f}, sync PS {m['sync'][0]:,.0f}; "
              f"allreduce / sync {m['allreduce'][0] / m['sync'][0]:.2f} "
              f"(median of the rounds' ratios {rounds:.2f}), "
              f"memory / Gloo {m['allreduce'][0] / m['allreduce gloo'][0]:.1f}"
              "\nallreduce runs: " + ", ".join(
                  f"{x:,.0f}" for x in runs["allreduce"]) + "; sync runs: "
              + ", ".join(f"{x:,.0f}" for x in runs["sync"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
