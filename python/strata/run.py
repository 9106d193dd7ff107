"""A run's results, read from its run directory (docs/design/run_directory.md):
summary.json, metrics.jsonl, eval.jsonl, config.toml and model.safetensors."""

import json
import os
import struct
import tomllib
from dataclasses import dataclass, field, fields


@dataclass
class Summary:
    """summary.json with its common figures as typed attributes. Every other
    key of the file (a cluster's per-worker metrics `workers`, the servers'
    `servers_stats`, ...) is an attribute too, and all of it is in `raw`."""

    final_train_loss: float = float("nan")
    final_train_acc: float = float("nan")
    final_val_loss: float = float("nan")
    final_val_acc: float = float("nan")
    wall_s: float = 0.0
    train_s: float = 0.0
    samples_per_s: float = 0.0
    steps: int = 0
    samples: int = 0
    epochs: float = 0.0
    parameters: int = 0
    interrupted: bool = False
    mode: str = ""
    model: str = ""
    dataset: str = ""
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d):
        kinds = {f.name: f.type for f in fields(cls) if f.name != "raw"}
        typed = {k: kinds[k](v) for k, v in d.items()
                 if k in kinds and v is not None}
        return cls(raw=dict(d), **typed)

    def __getattr__(self, name):
        # Only called for names that are not fields: the file's other keys.
        raw = self.__dict__.get("raw", {})
        if name in raw:
            return raw[name]
        raise AttributeError(f"the summary has no '{name}' "
                             f"(its keys: {', '.join(sorted(raw))})")


def read_jsonl(path):
    """Every complete JSON line of `path` ([] when it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.endswith("\n")
                and line.strip()]


class JsonlTail:
    """The lines appended to a JSON-lines file since the last look; a line
    still being written is left for the next look."""

    def __init__(self, path, from_end=False):
        """from_end: only lines appended after now (a resumed run's)."""
        self.path = path
        self.offset = 0
        if from_end and os.path.exists(path):
            self.offset = os.path.getsize(path)

    def new_records(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        return [json.loads(line) for line in chunk[:end].splitlines()
                if line.strip()]


_DTYPES = {"F32": "float32", "I64": "int64", "F64": "float64",
           "I32": "int32", "F16": "float16", "BF16": "bfloat16"}


def load_safetensors(path):
    """A safetensors file as {name: torch.Tensor} (the tensors own their
    memory). strata.DataLoss when the file is not a valid one."""
    import torch
    from .errors import DataLoss

    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise DataLoss(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise DataLoss(f"{path}: header of {n} bytes runs past the end")
    try:
        header = json.loads(blob[8:8 + n])
    except ValueError as e:
        raise DataLoss(f"{path}: header is not JSON: {e}") from None
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        if t["dtype"] not in _DTYPES or end > len(data) or begin > end:
            raise DataLoss(f"{path}: tensor {name}: bad dtype or offsets")
        dtype = getattr(torch, _DTYPES[t["dtype"]])
        raw = bytearray(data[begin:end])
        tensor = torch.frombuffer(raw, dtype=dtype) if raw else \
            torch.empty(0, dtype=dtype)
        out[name] = tensor.reshape(t["shape"])
    return out


def _frame(records):
    try:
        import pandas
    except ImportError:
        return records
    return pandas.DataFrame.from_records(records)


class Run:
    """A finished (or interrupted) run: what strata.train returns and
    strata.load_run reads back.

    run_dir      the run directory
    summary      Summary (summary.json)
    interrupted  True when Ctrl-C (or stop) ended it early
    config       the resolved config, flat {"section.key": value}
    metrics      metrics.jsonl as a list of dicts (a DataFrame with pandas)
    evals        eval.jsonl likewise
    state_dict() the trained parameters and buffers as torch tensors, under
                 the model's own names (model.load_state_dict takes them);
                 state_dict(model): exactly model's keys and dtypes
    """

    def __init__(self, run_dir, brief=None):
        self.run_dir = os.fspath(run_dir)
        path = os.path.join(self.run_dir, "summary.json")
        summary = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                summary = json.load(f)
        # The trainer's own brief fills what the file does not say.
        for k, v in (brief or {}).items():
            summary.setdefault(k, v)
        if brief and brief.get("interrupted"):
            summary["interrupted"] = True
        self.summary = Summary.from_json(summary)

    @property
    def interrupted(self):
        return self.summary.interrupted

    def file(self, name):
        return os.path.join(self.run_dir, name)

    @property
    def config(self):
        path = self.file("config.toml")
        if not os.path.exists(path):
            from .errors import NotFound
            raise NotFound(f"{path}: the run has no config.toml")
        with open(path, "rb") as f:
            nested = tomllib.load(f)
        flat = {}

        def walk(d, prefix):
            for k, v in d.items():
                if isinstance(v, dict):
                    walk(v, prefix + k + ".")
                else:
                    flat[prefix + k] = v
        walk(nested, "")
        return flat

    @property
    def metrics(self):
        return _frame(read_jsonl(self.file("metrics.jsonl")))

    @property
    def evals(self):
        return _frame(read_jsonl(self.file("eval.jsonl")))

    def state_dict(self, like=None):
        """The trained tensors by name. With `like` (a module or a
        state_dict), exactly its keys in its dtypes: what its
        load_state_dict(strict=True) takes even when the file also holds
        non-persistent buffers, or float64 tensors strata stores as float32.
        strata.InvalidArgument names the keys `like` has and the run lacks."""
        path = self.file("model.safetensors")
        if not os.path.exists(path):
            from .errors import NotFound
            raise NotFound(f"{path}: no trained model (the run did not "
                           "finish, or ended with an error)")
        tensors = load_safetensors(path)
        if like is None:
            return tensors
        ref = like.state_dict() if hasattr(like, "state_dict") else like
        missing = [k for k in ref if k not in tensors]
        if missing:
            from .errors import InvalidArgument
            raise InvalidArgument(
                f"{path} has no {', '.join(missing)} (it has "
                f"{', '.join(sorted(tensors))})")
        return {k: tensors[k].to(ref[k].dtype) for k in ref}

    def __repr__(self):
        s = self.summary
        state = " interrupted" if s.interrupted else ""
        return (f"<strata.Run{state} {self.run_dir}: val acc "
                f"{s.final_val_acc:.4f}, {s.samples_per_s:.0f} samples/s>")


def load_run(run_dir):
    """A run directory read back as a Run. strata.NotFound when `run_dir`
    holds no run."""
    from .errors import NotFound
    if not any(os.path.exists(os.path.join(run_dir, f))
               for f in ("summary.json", "config.toml", "metrics.jsonl")):
        raise NotFound(f"{run_dir}: not a run directory (no summary.json, "
                       "config.toml or metrics.jsonl)")
    return Run(run_dir)
