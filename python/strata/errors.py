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


class IoError(Error, OSError):
    """A file or directory that cannot be read or written."""

    code = "IoError"


class DeadlineExceeded(Error, TimeoutError):
    """A wait that ran past its timeout (the message says for what)."""

    code = "DeadlineExceeded"


class Unavailable(Error):
    """A peer is gone (a lost node)."""

    code = "Unavailable"


class FailedPrecondition(Error):
    """A state that does not allow the call (e.g. a plan for another
    dataset)."""

    code = "FailedPrecondition"


class Cancelled(Error):
    """Stopped before it finished."""

    code = "Cancelled"


class Unimplemented(Error):
    """Not built for this case (the message says which)."""

    code = "Unimplemented"


_BY_CODE = {c.code: c for c in (
    InvalidArgument, NotFound, DataLoss, IoError, DeadlineExceeded,
    Unavailable, FailedPrecondition, Cancelled, Unimplemented)}


def error_class(code):
    """The exception class for strata status code `code` (the native module
    raises strata's errors with it); Error for "Internal" and any other."""
    return _BY_CODE.get(code, Error)
