"""Where trajectory records go. The recorder (recorder.py) builds each ended episode's record and hands every batch
of them to its sinks on its one writer thread: its JSONL file (jsonl.py) first, then each registered sink its options
turn on. A sink never raises for one record: what it could not take it counts (`unsent()`) and says
(`said()`).

A new sink is one module with a class that has the `Sink` methods and a `made(recorder)` class method (the sink, or
None when the recorder's options do not ask for it), plus its line in `REGISTERED` below (CONTRIBUTING: "A new
record sink").
"""

from __future__ import annotations

from typing import Any, Protocol

from orsgen.runtime import upload


class Sink(Protocol):
    """One place records go, fed from the recorder's writer thread."""

    def write(self, records: list[dict[str, Any]]) -> None:
        """Take a batch of records (quickly: the file waits behind it); never raise for one of them."""

    def flush(self, timeout: float) -> bool:
        """Wait (at most `timeout`) until what was written has reached its place: whether all of it did."""

    def close(self, timeout: float) -> None:
        """The run's end: what is held goes, at most `timeout` seconds."""

    def unsent(self) -> int:
        """Records written to it that did not reach their place."""

    def said(self) -> str | None:
        """This sink's part of the run's end line, said when some record did not reach a sink (None: nothing)."""


class Registered(Protocol):
    @classmethod
    def made(cls, recorder: Any) -> Sink | None: ...


REGISTERED: tuple[type[Registered], ...] = (
    upload.UploadSink,  # Trajectories(upload=True): the OpenReward runs page
)


def made(recorder: Any) -> list[Sink]:
    """The registered sinks `recorder`'s options turn on, in `REGISTERED`'s order."""
    return [sink for cls in REGISTERED if (sink := cls.made(recorder)) is not None]
