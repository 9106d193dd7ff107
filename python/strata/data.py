"""strata.load_dataset: a run's dataset as strata trains on it."""

from dataclasses import dataclass

from . import _strata
from .config import Config


@dataclass
class Split:
    """One split: features [N, C, H, W] float32 and labels [N] int64, as
    torch tensors sharing strata's memory (no copy)."""

    name: str
    features: object
    labels: object
    classes: int

    def __len__(self):
        return int(self.labels.shape[0])


@dataclass
class Dataset:
    train: Split
    val: Split


def _split(d):
    import torch
    x = torch.frombuffer(d["features"], dtype=torch.float32)
    y = torch.frombuffer(d["labels"], dtype=torch.int64)
    return Split(d["name"], x.reshape(d["shape"]), y, d["classes"])


def load_dataset(config=None, **overrides):
    """The dataset a config names (data.*), exactly as strata trains and
    evaluates on it: the validation split held out, standardised when
    data.normalize is set. `config` and `overrides` as for strata.train."""
    splits = _strata.load_dataset(Config(config, **overrides))
    return Dataset(_split(splits["train"]), _split(splits["val"]))
