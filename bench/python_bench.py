"""strata.train (Python) against `strata train` (the CLI) on one config,
side by side, and the import time of the strata package.

usage: /usr/bin/python3 bench/python_bench.py BUILD_DIR [--repeats N]
           [-c CONFIG] [--set key=value ...]
Default config: examples/mnist_mlp.toml for 1 epoch (needs STRATA_DATA_DIR)
in sync PS, 1 server + 2 workers as threads, and in local mode; synthetic
data when STRATA_DATA_DIR is unset. Runs alternate (CLI, Python, Python,
CLI, ...) so drift on a shared machine hits both; the figures are medians.
Skips (exit 0, saying why) without python3-torch or the built package.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def import_seconds(code, repeats, env):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cli_run(exe, config, overrides, root, name):
    args = [exe, "train"] + (["-c", config] if config else [])
    for o in overrides + [f"run.dir={root}", f"run.name={name}"]:
        args += ["--set", o]
    subprocess.run(args, check=True, capture_output=True)
    with open(os.path.join(root, name, "summary.json")) as f:
        return json.load(f)["samples_per_s"]


def compare(strata, exe, config, overrides, repeats, root, label):
    cli, py = [], []
    for i in range(repeats):
        order = ("cli", "py") if i % 2 == 0 else ("py", "cli")
        for who in order:
            name = f"{label}-{who}-{i}"
            if who == "cli":
                cli.append(cli_run(exe, config, overrides, root, name))
            else:
                o = dict(x.split("=", 1) for x in overrides)
                o.update({"run.dir": root, "run.name": name})
                run = strata.train(None, config, overrides=o)
                py.append(run.summary.samples_per_s)
    c, p = statistics.median(cli), statistics.median(py)
    print(f"| {label} | {c:,.0f} | {p:,.0f} | {p / c:.3f} | "
          f"{' '.join(f'{x:,.0f}' for x in cli)} / "
          f"{' '.join(f'{x:,.0f}' for x in py)} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("-c", "--config")
    ap.add_argument("--set", action="append", default=[])
    a = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=os.path.join(a.build, "python"))
    sys.path.insert(0, env["PYTHONPATH"])
    try:
        import torch  # noqa: F401
        import strata
    except ImportError as e:
        print(f"python_bench: skipped ({e}: needs python3-torch and the "
              "built package)")
        return 0
    exe = strata.training.strata_exe()
    data_dir = os.environ.get("STRATA_DATA_DIR")
    config, base = a.config, list(a.set)
    if config is None and data_dir:
        config = os.path.join(os.path.dirname(__file__), "..", "examples",
                              "mnist_mlp.toml")
        base = [f"data.dir={data_dir}/mnist", "train.epochs=1",
                "metrics.tensorboard=false"] + base
    elif config is None:
        base = ["train.epochs=1", "metrics.tensorboard=false"] + base
    root = tempfile.mkdtemp(prefix="strata-python-bench-")
    print(f"config: {config or 'defaults (synthetic)'} {' '.join(base)}; "
          f"{a.repeats} runs each, alternating")
    print("| run | strata train samples/s | strata.train samples/s | "
          "ratio | each (CLI / Python) |")
    print("| --- | --- | --- | --- | --- |")
    compare(strata, exe, config, base + [
        "cluster.mode=sync", "cluster.servers=1", "cluster.workers=2"],
        a.repeats, root, "sync 1 + 2, threads")
    compare(strata, exe, config, base + ["cluster.mode=local"], a.repeats,
            root, "local")
    bare = import_seconds("pass", 5, env)
    torch_s = import_seconds("import torch", 5, env)
    both = import_seconds("import torch, strata", 5, env)
    alone = import_seconds("import strata", 5, env)
    print(f"\nimport (median of 5, interpreter start {bare:.3f} s "
          f"subtracted): torch {torch_s - bare:.3f} s; strata alone "
          f"{alone - bare:.3f} s; strata after torch "
          f"{both - torch_s:.3f} s more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
