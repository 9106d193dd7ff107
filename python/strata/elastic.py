"""Another number of workers for a running job (docs/guide/elastic.md)."""
from dataclasses import dataclass

from . import _strata


@dataclass
class Scaled:
    """What `scale` saw: the worker counts, the checkpoint's step, and the
    seconds from the request to training again."""
    from_workers: int
    to_workers: int
    step: int
    since_request_s: float


def scale(run_dir, workers=None, timeout=120.0, drain=(), data_servers=0):
    """Asks the running job in `run_dir` (strata.train, or `strata train`,
    on this machine) to go on with `workers` workers, as `strata scale`
    does, and waits until it trains on them. `drain`: the workers to leave
    (`strata scale --drain`), the ones after them renumbered; `workers` may
    then be left out. `data_servers`: a new number of data servers for a
    run fed by the data service (`strata scale --data-servers`). The run
    needs checkpoints on.
    Raises InvalidArgument or FailedPrecondition for a request the run
    cannot take (naming why), DeadlineExceeded when no run took it within
    `timeout` seconds. Call it from another thread or from a callback of
    strata.train (training goes on in its own thread)."""
    f, t, step, s = _strata.scale(str(run_dir), int(workers or 0),
                                  float(timeout), [int(w) for w in drain],
                                  int(data_servers))
    return Scaled(f, t, step, s)
