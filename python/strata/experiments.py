"""strata.experiment and strata.load_experiment: `strata experiment` and
`strata report` from Python (docs/guide/experiments.md)."""

import json
import os
import re
import tempfile

from . import _strata
from .errors import InvalidArgument
from .run import Run
from .training import _checked_exe, wait_for

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


def _dict_spec_file(spec):
    """A dict spec written as TOML to a temporary file: it must name the
    experiment (the output folder and a resume depend on it), and a
    relative `config` path is taken from the current directory, as the
    caller sees it."""
    if not spec.get("name"):
        raise InvalidArgument(
            "experiment spec: a dict needs a 'name' (its output folder, "
            "runs/<name> by default, and a later resume depend on it)")
    spec = dict(spec)
    if spec.get("config"):
        spec["config"] = os.path.abspath(spec["config"])
    fd, path = tempfile.mkstemp(prefix="strata-experiment-", suffix=".toml")
    with os.fdopen(fd, "w") as f:
        f.write(spec_to_toml(spec))
    return path


def _output_of(spec, path):
    """Where `strata experiment` puts the results (spec.cc): the spec's
    output, else runs/<name>, the name defaulting to the file's stem."""
    if not isinstance(spec, dict):
        import tomllib
        with open(path, "rb") as f:
            spec = tomllib.load(f)
    name = spec.get("name") or os.path.splitext(os.path.basename(path))[0]
    return spec.get("output") or os.path.join("runs", name)


def experiment(spec, *, output=None, parallel=0, run_timeout_s=0,
               dry_run=False):
    """Runs an experiment as `strata experiment -c SPEC` does (runs already
    complete in the output are kept, so calling it again resumes) and
    returns its Experiment; with dry_run, prints the plan and returns None.

    spec  an experiment file's path, or the same content as a dict
          ({"name", "output", "repeats", "base": {...}, "cells": [...]};
          "name" required, a relative "config" taken from the current
          directory)
    The returned Experiment's exit_code is what the CLI would exit with:
    0 when every run is complete, 1 when some run failed (its log is in
    the summary's runs), 130 when Ctrl-C stopped it. A bad spec raises.
    """
    exe = _checked_exe("strata.experiment")
    path = _dict_spec_file(spec) if isinstance(spec, dict) else \
        os.fspath(spec)
    try:
        out = os.fspath(output) if output else _output_of(spec, path)
        job = _strata.start_experiment(path, out, parallel,
                                       float(run_timeout_s), dry_run, exe)
        try:
            wait_for(job)
        finally:
            job.stop()
        code = json.loads(job.result())["exit_code"]
    finally:
        if isinstance(spec, dict):
            os.remove(path)
    return None if dry_run else Experiment(out, exit_code=code)


def load_experiment(output):
    """An experiment (or run) directory's results, as `strata report` reads
    them."""
    return Experiment(output)
