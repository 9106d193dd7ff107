"""Shared helpers of strata's Python tests."""
import os
import tempfile

import torch
from torch import nn
import torch.nn.functional as F


def temp_root(name):
    """A fresh directory under $STRATA_TEST_TMP (ctest sets it)."""
    base = os.environ.get("STRATA_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"python_{name}_", dir=base)


class Mlp(nn.Module):
    """A small MLP defined in Python: 64 -> 32 -> 10 (strata's synthetic
    data: 64 features, 10 classes)."""

    def __init__(self, inputs=64, hidden=32, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(inputs, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        x = x.reshape(x.shape[0], -1)
        return self.fc2(F.relu(self.fc1(x)))


def small_config(root, name, **extra):
    """A short synthetic run that writes into `root`/`name`."""
    c = {
        "run.dir": root,
        "run.name": name,
        "data.synthetic.train_size": 2000,
        "data.synthetic.val_size": 500,
        "train.batch_size": 32,
        "train.iterations": 40,
        "train.log_every": 5,
        "train.threads": 1,
        "metrics.tensorboard": False,
    }
    c.update(extra)
    return c


def accuracy(model, split, batch=500):
    """`model`'s accuracy on a strata.Split."""
    model.eval()
    right = 0
    with torch.no_grad():
        for i in range(0, len(split), batch):
            logits = model(split.features[i:i + batch])
            right += int((logits.argmax(1) == split.labels[i:i + batch]).sum())
    return right / len(split)
