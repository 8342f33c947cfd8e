"""The records' JSONL file: one sink (sinks.py) appending whole lines, one JSON record each, from the recorder's one
writer thread. The file is opened for appending, each batch of whole lines goes in one write, and a line left cut by a
killed process is removed when the file is next opened, so every line of the file is a record. A record is written
whatever it holds (a model's lone surrogate as its `\\uXXXX` escape, jsontext.py), or counted lost with one warning
line; a write the disk refused leaves nothing of its lines behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from orsgen.runtime import client, jsontext
from orsgen.runtime.trajectories import describe

log = logging.getLogger("orsgen")


class File:
    """One JSONL file, appended to in whole lines by one thread; a line a killed process left cut is removed first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def write(self, lines: list[str]) -> None:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            self._repair(self._fd)
        data = "".join(line + "\n" for line in lines).encode()
        before = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError:  # a full disk takes part of a write: the whole lines before it stay, nothing of the rest
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, before)
            raise

    def _repair(self, fd: int) -> None:
        size = os.lseek(fd, 0, os.SEEK_END)
        if size == 0:
            return
        at, tail = size, b""
        while at > 0 and b"\n" not in tail:
            at = max(0, at - 65536)
            tail = os.pread(fd, size - at, at)
        keep = at + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
        if keep != size:
            log.warning("orsgen: %s ended in a cut line (a process killed mid-write): removed it", self.path)
            os.ftruncate(fd, keep)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class JsonlSink:
    """The recorder's file (`path`: called at the first write, a rank being known by then). `written` and `lost` count
    records; `failure` is the last write the disk refused, in words. `quiet`: its caller says what failed (orsgen
    eval stops on it), so no warning here."""

    def __init__(self, path: Any, quiet: bool = False) -> None:
        self._path = path
        self.file: File | None = None
        self.written = self.lost = 0
        self.failure: str | None = None
        self.quiet = quiet

    @property
    def path(self) -> Path:
        return self.file.path if self.file is not None else self._path()  # type: ignore[no-any-return]

    def write(self, records: list[dict[str, Any]]) -> None:
        lines = []
        for record in records:
            try:
                lines.append(jsontext.dumps(record, default=describe))
            except (ValueError, TypeError, RecursionError) as exc:  # a cycle, a key JSON cannot hold
                self.lost += 1
                self._warn(f"trajectories-json-{id(self)}", "orsgen: a trajectory record cannot be written as JSON "
                           "(%s): dropped, counted in Recorder.dropped", client.describe(exc))
        if not lines:
            return
        try:
            if self.file is None:
                self.file = File(self._path())
            self.file.write(lines)
            self.written += len(lines)
        except OSError as exc:
            self.lost += len(lines)
            self.failure = str(exc.strerror or exc)
            self._warn(f"trajectories-write-{self.path.parent}", "orsgen: trajectory records are not being written to "
                       "%s: %s (dropped, counted in Recorder.dropped; training goes on)", self.path,
                       exc.strerror or exc)

    def flush(self, timeout: float) -> bool:
        return self.lost == 0

    def close(self, timeout: float) -> None:
        if self.file is not None:
            self.file.close()

    def unsent(self) -> int:
        return self.lost

    def said(self) -> str | None:
        return None  # the recorder says the file's part, with what never reached it

    def _warn(self, key: str, message: str, *args: Any) -> None:
        if not self.quiet:
            client.once(key, logging.WARNING, message, *args)
