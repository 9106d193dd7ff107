"""strata.experiment and strata.load_experiment: `strata experiment` and
`strata report` from Python (docs/guide/experiments.md)."""

import json
import os
import re
import tempfile

from . import _strata
from .errors import InvalidArgument
from .run import Run
from .training import _finish, _POLL_S, strata_exe

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key):
    return key if _BARE.match(key) else json.dumps(key)


def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}"
                                for k, x in v.items()) + " }"
    raise InvalidArgument(f"experiment spec: cannot write {v!r} as TOML")


def spec_to_toml(spec):
    """An experiment spec given as a dict, as the TOML `strata experiment`
    reads: scalars first, then tables ("base", "grid", ...), then arrays
    of tables ("cells")."""
    lines, tables, arrays = [], [], []
    for k, v in spec.items():
        if isinstance(v, dict):
            tables.append((k, v))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            arrays.append((k, v))
        else:
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    for k, table in tables:
        lines.append(f"\n[{_toml_key(k)}]")
        lines += [f"{_toml_key(a)} = {_toml_value(b)}"
                  for a, b in table.items()]
    for k, items in arrays:
        for item in items:
            lines.append(f"\n[[{_toml_key(k)}]]")
            lines += [f"{_toml_key(a)} = {_toml_value(b)}"
                      for a, b in item.items()]
    return "\n".join(lines) + "\n"


class Experiment:
    """An experiment's results (strata report's summary): per cell, n and the
    mean, variance and variance ratio of every final metric.

    output    the experiment directory
    summary   the whole summary as a dict (summary.json's content)
    cells     the per-cell entries of the summary
    runs      a Run for each complete run
    exit_code what `strata experiment` would have exited with (None when
              only loaded)
    """

    def __init__(self, output, exit_code=None):
        self.output = os.fspath(output)
        self.summary = json.loads(_strata.load_results(self.output))
        self.exit_code = exit_code

    @property
    def cells(self):
        return self.summary.get("cells", [])

    @property
    def runs(self):
        return [Run(r["dir"]) for r in self.summary.get("runs", [])
                if r.get("state") == "complete" and r.get("dir")]

    def cell(self, name):
        for c in self.cells:
            if c.get("name") == name:
                return c
        raise KeyError(f"no cell '{name}' (cells: "
                       f"{', '.join(c.get('name', '?') for c in self.cells)})")

    def frame(self):
        """One row per cell and metric: cell, metric, n, mean, variance,
        variance_ratio (a pandas DataFrame with pandas, else dicts)."""
        rows = []
        for c in self.cells:
            for metric, s in (c.get("metrics") or {}).items():
                if isinstance(s, dict):
                    rows.append({"cell": c.get("name"), "metric": metric, **s})
        try:
            import pandas
            return pandas.DataFrame.from_records(rows)
        except ImportError:
            return rows

    def __repr__(self):
        return f"<strata.Experiment {self.output}: {len(self.cells)} cells>"


def experiment(spec, *, output=None, parallel=0, run_timeout_s=0,
               dry_run=False):
    """Runs an experiment as `strata experiment -c SPEC` does (runs already
    complete in `output` are kept) and returns its Experiment.

    spec  an experiment file's path, or the same content as a dict
          ({"name", "output", "repeats", "base": {...}, "cells": [...]})
    Ctrl-C stops it as in the CLI (call again to resume); the returned
    Experiment then has exit_code 130.
    """
    if isinstance(spec, dict):
        fd, path = tempfile.mkstemp(prefix="strata-experiment-",
                                    suffix=".toml")
        with os.fdopen(fd, "w") as f:
            f.write(spec_to_toml(spec))
    else:
        path = os.fspath(spec)
    job = _strata.start_experiment(path, os.fspath(output or ""), parallel,
                                   float(run_timeout_s), dry_run,
                                   strata_exe())
    try:
        while not job.wait(_POLL_S):
            pass
    except KeyboardInterrupt:
        _finish(job)
    code = json.loads(job.result())["exit_code"]
    if dry_run:
        return None
    out = output or _output_of(path)
    return Experiment(out, exit_code=code)


def _output_of(path):
    import tomllib
    with open(path, "rb") as f:
        spec = tomllib.load(f)
    return spec.get("output") or os.path.join("runs", spec.get("name", ""))


def load_experiment(output):
    """An experiment (or run) directory's results, as `strata report` reads
    them."""
    return Experiment(output)
