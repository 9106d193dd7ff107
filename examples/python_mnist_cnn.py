"""A custom CNN defined in Python, trained on MNIST by a strata cluster of 4
workers, async and then sync, with the curves plotted (docs/guide/python.md).

From the repository root, after `make test` (or `cmake --build build`):
    PYTHONPATH=build/python /usr/bin/python3 examples/python_mnist_cnn.py \
        --data ../shared/data/mnist
Writes runs/python-cnn-async, runs/python-cnn-sync and, with
python3-matplotlib, runs/python-cnn.png. --iterations sets the budget per
worker (default 300).
"""
import argparse
import os

import torch
from torch import nn
import torch.nn.functional as F

import strata


class SmallCnn(nn.Module):
    """conv 16@5x5, pool, conv 32@5x5, pool, 10 logits."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.reshape(x.shape[0], -1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/mnist")
    ap.add_argument("--iterations", type=int, default=300)
    a = ap.parse_args()
    config = {
        "data": {"dataset": "mnist", "dir": a.data},
        "train": {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
                  "batch_size": 64, "iterations": a.iterations},
        "cluster": {"servers": 1, "workers": 4},
        "eval.every_s": 0.5,
    }
    runs = {}
    for mode in ("async", "sync"):
        torch.manual_seed(0)  # the same starting point for both
        net = SmallCnn()
        run = strata.train(
            net, config, cluster__mode=mode,
            run__name=f"python-cnn-{mode}",
            on_eval=lambda r, m=mode: print(
                f"{m}: step {r.get('step', r.get('version'))} "
                f"val acc {r.get('val_acc', float('nan')):.4f}"))
        net.load_state_dict(run.state_dict(), strict=True)
        runs[mode] = run
        print(f"{mode}: {run}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: curves not plotted")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, run in runs.items():
        evals = run.evals if isinstance(run.evals, list) else \
            run.evals.to_dict("records")
        xs = [e["wall_s"] for e in evals if "val_acc" in e]
        ys = [e["val_acc"] for e in evals if "val_acc" in e]
        ax.plot(xs, ys, label=mode)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("validation accuracy")
    ax.legend()
    out = os.path.join("runs", "python-cnn.png")
    fig.savefig(out, dpi=120)
    print(f"curves: {out}")


if __name__ == "__main__":
    main()
