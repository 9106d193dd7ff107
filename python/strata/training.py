"""strata.train: `strata train` from Python."""

import collections
import hashlib
import io
import json
import os
import sys
import time

from . import _strata
from .config import Config, overrides_of
from .errors import InvalidArgument, ModelError
from .run import JsonlTail, Run

_POLL_S = 0.2  # how often the caller looks for Ctrl-C and new lines


def strata_exe():
    """The strata binary that --processes and experiments start: $STRATA_EXE,
    else the one this package was built with, else `strata` on PATH."""
    exe = os.environ.get("STRATA_EXE")
    if exe:
        return exe
    try:
        from ._build_info import STRATA_EXE
        if os.path.exists(STRATA_EXE):
            return STRATA_EXE
    except ImportError:
        pass
    import shutil
    return shutil.which("strata") or ""


def script_model(model):
    """`model` as a TorchScript module: scripted with torch.jit.script
    unless it is one already. strata.ModelError names what TorchScript
    cannot compile."""
    import torch
    if isinstance(model, torch.jit.ScriptModule):
        return model
    if not isinstance(model, torch.nn.Module):
        raise ModelError(
            f"model: an nn.Module or a built-in model's name (mlp, lenet, "
            f"cnn4, resnet20, ...), not {type(model).__name__}")
    try:
        return torch.jit.script(model)
    except Exception as e:  # torch.jit's frontend errors vary by construct
        raise ModelError(
            f"{type(model).__name__}: TorchScript cannot compile it, so "
            f"strata cannot train it: {str(e).strip()}") from None


def save_model(model, run_root):
    """Scripts `model` and saves it under <run.dir>/models/, named by its
    content (the same module is saved once); returns the path, which the
    run's config.toml keeps as model.path (so resume and export find it)."""
    import torch
    buf = io.BytesIO()
    torch.jit.save(script_model(model), buf)
    blob = buf.getvalue()
    digest = hashlib.sha256(blob).hexdigest()[:16]
    folder = os.path.join(run_root, "models")
    os.makedirs(folder, exist_ok=True)
    path = os.path.abspath(
        os.path.join(folder, f"{type(model).__name__}-{digest}.pt"))
    if not os.path.exists(path):
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    return path


def _model_overrides(model, config):
    if model is None:
        return []
    if isinstance(model, str):
        return [f"model.name={model}"]
    path = save_model(model, config.get("run.dir"))
    return ["model.name=torchscript", f"model.path={path}"]


_STOP_GRACE_S = 120.0  # how long a stopped job may take to end


def _finish(job):
    """Asks `job` to stop and waits up to _STOP_GRACE_S for it to end; True
    when it ended. Ctrl-C while waiting raises KeyboardInterrupt."""
    job.stop()
    deadline = time.monotonic() + _STOP_GRACE_S
    while not job.wait(_POLL_S):
        if time.monotonic() > deadline:
            print(f"strata: the stopped job did not end within "
                  f"{_STOP_GRACE_S:.0f} s", file=sys.stderr)
            return False
    return True


def wait_for(job):
    """Waits for a job that has no callbacks; Ctrl-C stops it as in the
    CLI and waits for it to end (a second Ctrl-C stops waiting), then
    returns normally so the caller can read what was written."""
    _wait(job, [])


def _wait(job, tails):
    """Waits for the job, handing new lines to the callbacks. Ctrl-C (while
    waiting or in a callback) stops the run as in the CLI and goes on
    waiting for it to end; a second one raises KeyboardInterrupt at once. A
    callback's own exception stops the run, which is waited for, and is
    raised."""
    pending = collections.deque()

    def drain():
        for tail, callback in tails:
            pending.extend((callback, r) for r in tail.new_records())
        while pending:
            callback, record = pending.popleft()
            callback(record)
    while True:
        try:
            done = job.wait(_POLL_S)
            drain()
            if done:
                return
        except KeyboardInterrupt:
            if job.stop_requested:
                raise
            print("strata: stopping at the next step (Ctrl-C again to "
                  "stop waiting)", file=sys.stderr)
            job.stop()
        except BaseException:
            try:
                _finish(job)
            except KeyboardInterrupt:
                pass
            raise


def _checked_exe(what):
    exe = strata_exe()
    if not exe:
        raise InvalidArgument(
            f"{what} starts the strata binary, and none was found: set "
            "STRATA_EXE to its path, or put `strata` on PATH")
    return exe


class _TorchStateKept:
    """Keeps the caller's torch RNG state and thread count across a run
    (strata's runtime seeds LibTorch's global generator and sets its
    thread count, which the caller's torch shares)."""

    def __enter__(self):
        self.torch = sys.modules.get("torch")
        if self.torch is not None:
            self.rng = self.torch.get_rng_state()
            self.threads = self.torch.get_num_threads()
        return self

    def __exit__(self, *exc):
        if self.torch is not None:
            self.torch.set_rng_state(self.rng)
            self.torch.set_num_threads(self.threads)
        return False


def train(model=None, config=None, *, overrides=None, processes=False,
          resume=None, on_eval=None, on_log=None, **kwargs):
    """Trains as `strata train` does and returns the Run.

    model      an nn.Module (scripted with TorchScript here), a TorchScript
               module, a built-in model's name ("mlp", "lenet", ...), or
               None for the config's model.name
    config     a dict (nested or "section.key" keys), a TOML file's path,
               a strata.Config, or None for the defaults
    overrides  a dict of "section.key": value, applied after `config`;
               keyword arguments too, with "__" for the dot:
               strata.train(net, "mnist.toml", cluster__mode="sync")
    processes  one process per node (as `strata train --processes`)
    resume     a run directory to continue from its newest checkpoint (with
               its own config; `config` and `model` must then be None)
    on_eval    called with each line of eval.jsonl as it is written
    on_log     called with each line of metrics.jsonl as it is written

    The callbacks run in the calling thread between waits; training runs on
    a thread of its own with the GIL released. Ctrl-C (KeyboardInterrupt)
    stops the run as in the CLI and returns what was written, the Run
    marked interrupted. Errors raise strata.Error (strata.InvalidArgument
    for a bad key, naming it). The caller's torch RNG state and thread
    count are the same afterwards.
    """
    over = overrides_of(overrides) + overrides_of(kwargs)
    if resume is not None and (config is not None or model is not None):
        raise InvalidArgument("resume continues a run with its own "
                              "config.toml and model: drop config and model")
    base = Config(config)
    if resume is None:
        for o in over:
            base.apply(o)
        for o in _model_overrides(model, base):
            base.apply(o)
        over = []
    exe = _checked_exe("processes=True") if processes else strata_exe()
    with _TorchStateKept():
        job, run_dir, _ = _strata.start_train(
            "", base, over, bool(processes), os.fspath(resume or ""), exe)
        try:
            tails = [(JsonlTail(os.path.join(run_dir, name),
                                from_end=resume is not None), cb)
                     for name, cb in (("eval.jsonl", on_eval),
                                      ("metrics.jsonl", on_log))
                     if cb is not None]
            _wait(job, tails)
        except BaseException as e:
            if not isinstance(e, KeyboardInterrupt):
                e.add_note(f"strata: the run directory is {run_dir}")
            raise
        finally:
            job.stop()  # a no-op once it ended
        brief = json.loads(job.result())
    return Run(run_dir, brief)
