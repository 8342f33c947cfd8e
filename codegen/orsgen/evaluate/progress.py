"""The run's progress on stderr: episodes done and running, the pass rate so far, the time left. On a terminal one
line redrawn in place; elsewhere (a CI log) a line every 10 s. The runtime's warnings print above it."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.done, self.running, self.passed, self.counted = total, 0, 0, 0, 0
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self._began = self._shown = time.monotonic()
        self._drawn = False
        self._lock = threading.Lock()

    def line(self) -> str:
        elapsed = time.monotonic() - self._began
        rate = f"{100 * self.passed / self.counted:.0f}%" if self.counted else "-"
        left = (elapsed / self.done * (self.total - self.done)) if self.done else None
        eta = "-" if left is None else f"{int(left // 60)}:{int(left % 60):02d}"
        return (f"orsgen eval: {self.done}/{self.total} done, {self.running} running, pass rate so far {rate}, "
                f"{int(elapsed)}s elapsed, ETA {eta}")

    def show(self, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            if self.live:
                self.stream.write("\r\033[K" + self.line())
                self._drawn = True
            elif force or now - self._shown >= 10:
                self.stream.write(self.line() + "\n")
                self._shown = now
            self.stream.flush()

    def say(self, text: str) -> None:
        """A line above the bar."""
        with self._lock:
            if self._drawn:
                self.stream.write("\r\033[K")
                self._drawn = False
            self.stream.write(text + "\n")
            self.stream.flush()

    def end(self) -> None:
        if self.live and self._drawn:
            self.say(self.line())
        elif not self.live:
            self.show(force=True)


class Above(logging.Handler):
    """The runtime's log lines, printed above the progress line."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(logging.WARNING)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.progress.say(self.format(record))
        except Exception:  # noqa: BLE001 - logging never breaks the run
            self.handleError(record)
