"""What orsgen prints on stdout, where a reader that went away (`orsgen --check --diff | head`) ends nothing.

A closed pipe raises BrokenPipeError at the next write or flush. As Python's documentation advises (the signal
module's note on SIGPIPE), stdout is then pointed at os.devnull: the run goes on quietly and exits with its own
status (1 for a stale module), not a traceback.
"""

import os
import sys


def say(text: str, end: str = "\n") -> None:
    try:
        print(text, end=end)
    except BrokenPipeError:
        silence()


def flush() -> None:
    """At exit: what is still buffered, written now, so a closed pipe cannot fail later, at shutdown."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence()


def silence() -> None:
    """Every later write to stdout goes to os.devnull (the buffered rest included)."""
    try:
        fileno = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO): nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fileno)
    os.close(devnull)
