"""strata.shard: `strata shard` from Python (docs/design/sharding.md)."""

import json
import os
import tempfile
from dataclasses import dataclass, field

from . import _strata
from .config import Config, overrides_of
from .training import wait_for


@dataclass
class ShardPlan:
    """A shard plan and its report.

    workers    each worker's example indices (broadcast ones excluded)
    broadcast  the examples every worker gets (distribution-aware)
    report     the report: per worker counts, per class spread, TV
               distances ("tv_distance": {"per_worker", "max", "mean"})
    path       the plan file (train with it: data.shard_plan = path)
    """

    method: str
    workers: list
    broadcast: list
    report: dict
    path: str
    plan: dict = field(repr=False, default_factory=dict)

    @property
    def max_tv(self):
        return self.report["tv_distance"]["max"]

    def __repr__(self):
        sizes = [len(w) for w in self.workers] or [0]
        return (f"<strata.ShardPlan {self.method}, {len(self.workers)} "
                f"workers of {min(sizes)}-{max(sizes)} examples, max TV "
                f"{self.max_tv:.4f}: {self.path}>")


def shard(dataset=None, method=None, workers=None, *, config=None,
          out=None, **options):
    """Assigns a dataset's training examples to `workers` workers, as
    `strata shard` does, and returns the ShardPlan.

    dataset  a dataset's name ("mnist", "cifar10", "synthetic", ...) or
             None for the config's data.dataset
    method   random | mod | stratified | distribution-aware | class-clusters,
             or None for the config's data.sharding.method
    workers  number of workers (None or 0: the config's cluster.workers)
    config   as for strata.train (data.dir, data.normalize, ... live there)
    out      the plan file to write (default: a new temporary file, kept:
             train with it as data.shard_plan); its report is written
             beside it as <out>.report.json
    options  data.sharding.* settings by their short name (seed,
             pca_components, clusters, subclusters, ...), or any
             "section.key" override (data__dir="...")
    Ctrl-C stops it once the data is loaded (strata.Cancelled).
    """
    c = Config(config)
    if dataset is not None:
        c.set("data.dataset", dataset)
    if method is not None:
        c.set("data.sharding.method", method)
    for key, value in options.items():
        name = key.replace("__", ".")
        for o in overrides_of(
                {name if "." in name else "data.sharding." + name: value}):
            c.apply(o)
    n = int(workers or c.get("cluster.workers"))
    if out is None:
        fd, out = tempfile.mkstemp(prefix="strata-shard-", suffix=".json")
        os.close(fd)
    out = os.fspath(out)
    report_path = (out[:-5] if out.endswith(".json") else out) + \
        ".report.json"
    job = _strata.start_shard(c, n, out, report_path)
    try:
        wait_for(job)
    finally:
        job.stop()
    report = json.loads(job.result())
    with open(out, encoding="utf-8") as f:
        plan = json.load(f)
    return ShardPlan(method=plan["method"], workers=plan["workers"],
                     broadcast=plan["broadcast"], report=report, path=out,
                     plan=plan)
