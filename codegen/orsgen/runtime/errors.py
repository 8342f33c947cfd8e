"""The errors a generated module raises."""


class ToolError(RuntimeError):
    """A failed tool call. TRL shows the message to the model and counts the call in tools/failure_frequency."""


class TimedOut(ToolError):
    """A tool call with no answer within its bound (the tool's own timeout, or ORSGEN_TOOL_TIMEOUT): abandoned, its
    session still open (`hooks.ToolCall.timed_out`)."""


class DriftError(RuntimeError):
    """The server's tools are not the ones pinned in the module: regenerate it (or set ORSGEN_DRIFT_CHECK=0)."""


class StartError(RuntimeError):
    """An episode could not start and the adapter is set to raise (or too many did in a row)."""


class StartTimeout(TimeoutError):
    """An attempt at a session's start given up at its limit (ORSGEN_RESET_TIMEOUT; `hooks.SessionOpen.given_up`).
    A session the server opens after that is still the runtime's: it is closed as soon as its start ends."""


class WrongServer(StartError):
    """The session server does not serve the environment the module pins (`url=` or OPENREWARD_SESSION_URL)."""


def named(exc: Exception, where: str) -> Exception:
    """`exc` as the same kind of error, its message prefixed with `where` (a bundle names the environment)."""
    try:
        return type(exc)(f"{where}: {exc}")
    except Exception:  # noqa: BLE001 - an exception type that takes other arguments
        return RuntimeError(f"{where}: {type(exc).__name__}: {exc}")
