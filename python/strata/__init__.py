"""strata from Python: train an nn.Module on a strata cluster, run
experiments and read their results (docs/guide/python.md).

    import strata
    run = strata.train(net, "examples/mnist_mlp.toml", cluster__mode="sync",
                       cluster__workers=4)
    net.load_state_dict(run.state_dict())
    print(run.summary.final_val_acc, run.summary.samples_per_s)

Everything runs in strata's C++ runtime (the same code as the `strata`
command); training releases the GIL.
"""

from .config import Config, schema
from .data import Dataset, Split, load_dataset
from .elastic import Scaled, scale
from .errors import (Cancelled, DataLoss, DeadlineExceeded, Error,
                     FailedPrecondition, InvalidArgument, IoError, ModelError,
                     NotFound, Unavailable, Unimplemented)
from .experiments import Experiment, experiment, load_experiment
from .run import Run, Summary, load_run
from .sharding import ShardPlan, shard
from .training import script_model, train

try:
    from ._build_info import VERSION as __version__
except ImportError:  # an installed copy without the build's info
    __version__ = "0.1.0"

__all__ = [
    "Cancelled", "Config", "DataLoss", "Dataset", "DeadlineExceeded", "Error",
    "Experiment", "FailedPrecondition", "InvalidArgument", "IoError",
    "ModelError", "NotFound", "Run", "Scaled", "ShardPlan", "Split", "Summary",
    "Unavailable", "Unimplemented", "experiment", "load_dataset",
    "load_experiment", "load_run", "scale", "schema", "script_model", "shard",
    "train",
]
