"""The errors a generated module raises."""


class ToolError(RuntimeError):
    """A failed tool call. TRL shows the message to the model and counts the call in tools/failure_frequency."""


class DriftError(RuntimeError):
    """The server's tools are not the ones pinned in the module: regenerate it (or set ORSGEN_DRIFT_CHECK=0)."""


class StartError(RuntimeError):
    """An episode could not start and the adapter is set to raise (or too many did in a row)."""
