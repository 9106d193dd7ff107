"""strata's errors as Python exceptions.

Every error strata reports (a bad config key, a missing file, a corrupt
checkpoint, a lost node) arrives as an instance of Error, or of the subclass
for its kind, carrying strata's own message; the message names what is
wrong (the key and what is allowed, the file, the node).
"""


class Error(RuntimeError):
    """A strata error; `code` is strata's status code ("IoError", ...)."""

    code = "Internal"


class InvalidArgument(Error, ValueError):
    """A bad config key or value, or a launch that does not fit the mode."""

    code = "InvalidArgument"


class NotFound(Error, LookupError):
    """A file, run directory or checkpoint that is not there."""

    code = "NotFound"


class DataLoss(Error):
    """A corrupt or truncated file (dataset, checkpoint, plan)."""

    code = "DataLoss"


class ModelError(Error, TypeError):
    """A model strata cannot take: TorchScript cannot compile it, or it is
    neither an nn.Module nor a built-in model's name."""

    code = "InvalidArgument"


_BY_CODE = {c.code: c for c in (InvalidArgument, NotFound, DataLoss)}


def error_class(code):
    """The exception class for strata status code `code` (used by the
    native module to raise strata's errors)."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    # One class per remaining code, so `except strata.Error` catches all
    # and `e.code` still says which.
    cls = type(code, (Error,), {"code": code})
    _BY_CODE[code] = cls
    return cls
