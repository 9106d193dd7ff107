"""One `strata train` run on MNIST for the benches that compare whole runs
(emulation_bench.py, timeline_bench.py): quiet, evaluation off, one LibTorch
thread per worker, returns the run's summary.json."""
import json
import os
import subprocess


def train(exe, sets, root, name, config="examples/mnist_mlp.toml"):
    args = [exe, "train", "-c", config,
            "--set", f"data.dir={os.environ['STRATA_DATA_DIR']}/mnist",
            "--set", f"run.dir={root}", "--set", f"run.name={name}",
            "--set", "metrics.tensorboard=false", "--set", "eval.every_s=1000",
            "--set", "cluster.threads_per_worker=1"]
    for s in sets:
        args += ["--set", s]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(os.path.join(root, name, "summary.json")) as f:
        return json.load(f)
