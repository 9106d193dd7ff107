"""Run configurations: strata's config keys, from Python."""

import os
from collections.abc import Mapping

from . import _strata


def _flatten(mapping, prefix=""):
    """{"cluster": {"mode": "sync"}} and {"cluster.mode": "sync"} alike, as
    (key, value) pairs; "cluster__mode" (a keyword argument) is
    "cluster.mode"."""
    for key, value in mapping.items():
        name = prefix + str(key).replace("__", ".")
        if isinstance(value, Mapping):
            yield from _flatten(value, name + ".")
        else:
            yield name, value


def format_value(value):
    """A Python value in the form `strata train --set key=VALUE` takes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def overrides_of(mapping):
    """A mapping of overrides as the CLI's "section.key=value" strings."""
    return [f"{k}={format_value(v)}" for k, v in _flatten(mapping or {})]


class Config(_strata.Config):
    """A resolved run configuration: every key of strata's schema with its
    value (strata.schema() lists them).

        Config()                          # the defaults
        Config("examples/mnist_mlp.toml") # a TOML file over the defaults
        Config({"cluster": {"mode": "sync"}, "train.lr": 0.05})
        Config("base.toml", cluster__workers=4)

    A key strata does not know, a value of the wrong type or out of range
    raises strata.InvalidArgument naming the key and what is allowed.
    """

    def __init__(self, source=None, **overrides):
        super().__init__()
        if isinstance(source, _strata.Config):
            self.load_toml_string(source.to_toml(), "a strata.Config")
        elif isinstance(source, (str, os.PathLike)):
            self.load_toml(os.fspath(source))
        elif isinstance(source, Mapping):
            self.update(source)
        elif source is not None:
            raise TypeError(
                "config: a dict, a TOML file's path or a strata.Config, not "
                f"{type(source).__name__}")
        self.update(overrides)

    def update(self, mapping=None, **overrides):
        """Sets each key of `mapping` (nested or dotted) and `overrides`."""
        for key, value in _flatten(dict(mapping or {}, **overrides)):
            self.set(key, value)

    def __getitem__(self, key):
        return self.get(key)

    def __setitem__(self, key, value):
        self.set(key, value)

    def to_dict(self):
        """Every key and its value, flat: {"cluster.mode": "async", ...}."""
        return {name: self.get(name) for name, *_ in _strata.schema()}

    def __repr__(self):
        changed = {
            name: self.get(name)
            for name, _, default, *_ in _strata.schema()
            if self.get(name) != default
        }
        return f"strata.Config({changed!r})"


def schema():
    """Every config key as (name, type, default, help, choices)."""
    return list(_strata.schema())
