"""What is process-wide, in one holder (`STATE`): every piece of the runtime's state that outlives one adapter, one
batch or one call (live adapters' runners, sessions held, what is opened ahead, batches per trainer, a turn's calls
started ahead, counters, the runtime's loop, the listeners), each a part owned by its module and kept here by name
(`part`), and the exit's steps, run in one explicit order (`EXIT`).

Importing the runtime makes this holder empty and registers nothing; the exit is registered with `atexit` when the
first step is added, and again each time the runtime has imported the openreward SDK (`after_sdk`): Python runs exit
hooks last-registered first, so the runtime's steps (an upload's last sends, sessions closed on the runtime's loop)
run before the SDK's own hook stops its loop.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# The exit's steps, in their order: records are flushed while the runtime's loop runs (a record's task spec may need
# a request), uploads send what they hold while the SDK's loop runs, then the sessions still open are closed and the
# runtime's loop stops, then the recorders close their files, and last AsyncGRPOTrainer's worker lets its trainer's
# stop() return.
EXIT = ("flush records", "close uploads", "close sessions", "close records", "release worker")


class Process:
    """The runtime's process-wide state (see the module's docstring)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._parts: dict[str, Any] = {}
        self._steps: dict[str, list[Callable[[], Any]]] = {step: [] for step in EXIT}
        self._registered = False

    def part(self, name: str, make: Callable[[], T]) -> T:
        """The part `name` of the state (made by `make` at its first use): its module's own object."""
        found = self._parts.get(name)
        if found is None:
            with self.lock:
                found = self._parts.get(name)
                if found is None:
                    found = self._parts[name] = make()
        return found  # type: ignore[no-any-return]

    def parts(self) -> dict[str, Any]:
        """Every part made so far, by name."""
        return dict(self._parts)

    # -- the exit ------------------------------------------------------------------------------------------------

    def at_exit(self, step: str, run: Callable[[], Any]) -> None:
        """Run `run()` at the interpreter's exit, in step `step` (one of EXIT), after the step's earlier ones."""
        with self.lock:
            self._steps[step].append(run)
            if not self._registered:
                self._registered = True
                atexit.register(self.exit)

    def after_sdk(self) -> None:
        """The runtime has imported the openreward SDK (which registers its own exit hook): the exit is registered
        again, after it, so that it runs first."""
        with self.lock:
            atexit.unregister(self.exit)
            atexit.register(self.exit)
            self._registered = True

    def exit(self) -> None:
        """The exit's steps, in EXIT's order (each once; what one raises is dropped: exiting, nobody is told)."""
        for step in EXIT:
            with self.lock:
                runs, self._steps[step] = self._steps[step], []
            for run in runs:
                with contextlib.suppress(Exception):
                    run()


STATE = Process()  # (the one process-wide store of the runtime; a test counts them)
